#include <turnrl/kernels/candidate_api.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t M = in[0].shape[0], K = in[0].shape[1], N = in[1].shape[1];
  const float* x = in[0].data; const float* w = in[1].data; const float* b = in[2].data; float* y = out[0].data;
  for (int64_t i = 0; i < M; ++i) {
    float* yi = y + i * N;
    for (int64_t j = 0; j < N; ++j) yi[j] = b[j];
    for (int64_t k = 0; k < K; ++k) {
      const float xik = x[i * K + k];
      const float* wk = w + k * N;
      for (int64_t j = 0; j < N; ++j) yi[j] += xik * wk[j];
    }
    for (int64_t j = 0; j < N; ++j) yi[j] = yi[j] > 0.f ? yi[j] : 0.f;
  }
  return 0;
}
