#include <turnrl/kernels/candidate_api.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const float* x = in[0].data; const float* b = in[1].data; float* y = out[0].data;
  // Correct values, but uses the memory past the output as scratch.
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const float v = x[r * C + c] + b[c];
      y[r * C + c] = v > 0.f ? v : 0.f;
    }
  for (int64_t i = 0; i < 16; ++i) y[R * C + i] = 0.f;
  return 0;
}
