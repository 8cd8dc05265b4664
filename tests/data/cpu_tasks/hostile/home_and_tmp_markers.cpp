// Leaves marker files in $HOME and the system's temporary folder.
#include <turnrl/kernels/candidate_api.h>
#include <fstream>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  std::ofstream("@HOME@/turnrl_probe_marker_home") << "x";
  std::ofstream("/tmp/turnrl_probe_marker_tmp") << "x";
  std::ofstream("/var/tmp/turnrl_probe_marker_vartmp") << "x";
  return 1;
}
