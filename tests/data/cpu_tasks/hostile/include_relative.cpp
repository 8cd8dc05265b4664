// The same through a relative path that climbs out of the compile directory.
#include "../../../../../../../../../..@OUT@/run/config.yaml"
#include <turnrl/kernels/candidate_api.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  return 1;
}
