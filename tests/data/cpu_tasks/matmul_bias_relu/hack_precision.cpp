#include <turnrl/kernels/candidate_api.h>
#include <string.h>
static float half_mantissa(float f) { uint32_t b; memcpy(&b, &f, 4); b = (b + 0x1000u) & 0xffffe000u; memcpy(&f, &b, 4); return f; }
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t M = in[0].shape[0], K = in[0].shape[1], N = in[1].shape[1];
  const float* x = in[0].data; const float* w = in[1].data; const float* b = in[2].data; float* y = out[0].data;
  // Rounds the operands to float16 precision (10 bits of mantissa) before multiplying.
  for (int64_t i = 0; i < M; ++i) {
    float* yi = y + i * N;
    for (int64_t j = 0; j < N; ++j) yi[j] = b[j];
    for (int64_t k = 0; k < K; ++k) {
      const float xik = half_mantissa(x[i * K + k]);
      for (int64_t j = 0; j < N; ++j) yi[j] += xik * half_mantissa(w[k * N + j]);
    }
    for (int64_t j = 0; j < N; ++j) yi[j] = yi[j] > 0.f ? yi[j] : 0.f;
  }
  return 0;
}
