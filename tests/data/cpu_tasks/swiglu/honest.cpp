#include <turnrl/kernels/candidate_api.h>
#include <math.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t n = in[0].numel;
  const float* a = in[0].data; const float* g = in[1].data; float* y = out[0].data;
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] / (1.f + expf(-a[i])) * g[i];
  return 0;
}
