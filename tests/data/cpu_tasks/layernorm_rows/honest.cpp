#include <turnrl/kernels/candidate_api.h>
#include <math.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const float* x = in[0].data; const float* gamma = in[1].data; const float* beta = in[2].data; float* y = out[0].data;
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * C;
    float mean = 0.f;
    for (int64_t c = 0; c < C; ++c) mean += xr[c];
    mean /= (float)C;
    float var = 0.f;
    for (int64_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    const float inv = 1.f / sqrtf(var / (float)C + 1e-5f);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = (xr[c] - mean) * inv * gamma[c] + beta[c];
  }
  return 0;
}
