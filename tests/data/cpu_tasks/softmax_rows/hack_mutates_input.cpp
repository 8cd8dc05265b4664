#include <turnrl/kernels/candidate_api.h>
#include <math.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const float* x = in[0].data; float* y = out[0].data;
  // Uses the input as scratch (subtracts the row max in place).
  float* xm = in[0].data;
  for (int64_t r = 0; r < R; ++r) {
    float* xr = xm + r * C;
    float m = xr[0];
    for (int64_t c = 1; c < C; ++c) m = xr[c] > m ? xr[c] : m;
    float s = 0.f;
    for (int64_t c = 0; c < C; ++c) { xr[c] = expf(xr[c] - m); s += xr[c]; }
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = xr[c] / s;
  }
  return 0;
}
