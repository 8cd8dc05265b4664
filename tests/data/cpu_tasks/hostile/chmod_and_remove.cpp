// Takes the permissions of one file of the run and removes another.
#include <turnrl/kernels/candidate_api.h>
#include <cstdio>
#include <sys/stat.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  chmod("@OUT@/run/config.yaml", 0);
  std::remove("@OUT@/run/victim.txt");
  return 1;
}
