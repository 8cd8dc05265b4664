#include <turnrl/kernels/candidate_api.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const float* x = in[0].data; const float* b = in[1].data; float* y = out[0].data;
  return 7;  // reports an error
}
