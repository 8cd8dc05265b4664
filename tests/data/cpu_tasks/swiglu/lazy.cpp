#include <turnrl/kernels/candidate_api.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t n = in[0].numel;
  const float* a = in[0].data; const float* g = in[1].data; float* y = out[0].data;
  lib->sigmoid(a, y, n);
  lib->mul(y, a, y, n);
  lib->mul(y, g, y, n);
  return 0;
}
