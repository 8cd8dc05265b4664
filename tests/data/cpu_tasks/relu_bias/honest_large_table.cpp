#include <turnrl/kernels/candidate_api.h>
// An honest relu_bias whose object carries a 1 MiB initialised table (a lookup table a kernel might
// keep): its request is larger than the worker channel's socket buffer.
static float table[262144] = {1.f};
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const float* x = in[0].data; const float* b = in[1].data; float* y = out[0].data;
  const float zero = table[(R + C) % 262144] * 0.f;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const float v = x[r * C + c] + b[c] + zero;
      y[r * C + c] = v > 0.f ? v : 0.f;
    }
  table[1] = y[0];
  return 0;
}
