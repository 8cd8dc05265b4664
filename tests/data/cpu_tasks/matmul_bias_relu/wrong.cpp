#include <turnrl/kernels/candidate_api.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t M = in[0].shape[0], K = in[0].shape[1], N = in[1].shape[1];
  const float* x = in[0].data; const float* w = in[1].data; const float* b = in[2].data; float* y = out[0].data;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.f;
      for (int64_t k = 0; k < K; ++k) acc += x[i * K + k] * w[k * N + j];
      y[i * N + j] = (acc > 0.f ? acc : 0.f) + b[j];  // bias after the relu
    }
  return 0;
}
