#include <turnrl/kernels/candidate_api.h>
#include <math.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t n = in[0].numel;
  const float* x = in[0].data; float* y = out[0].data;
  const float k = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v)));
  }
  return 0;
}
