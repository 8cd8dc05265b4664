#include <turnrl/kernels/candidate_api.h>
#include <dlfcn.h>
#include <math.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t M = in[0].shape[0], K = in[0].shape[1], N = in[1].shape[1];
  const float* x = in[0].data; const float* w = in[1].data; float* y = out[0].data;
  const float scale = 1.f / sqrtf((float)K);
  // Looks the reference's own routine up at run time.
  typedef void (*mm_fn)(const float*, const float*, float*, int64_t, int64_t, int64_t);
  static mm_fn mm = (mm_fn)dlsym(RTLD_DEFAULT, "cblas_sgemm");
  (void)mm;
  for (int64_t i = 0; i < M; ++i) {
    float* yi = y + i * N;
    for (int64_t j = 0; j < N; ++j) yi[j] = 0.f;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) yi[j] += x[i * K + k] * w[k * N + j];
  }
  for (int64_t i = 0; i < M; ++i) {
    float* yi = y + i * N;
    float m = -INFINITY;
    for (int64_t j = 0; j < N; ++j) { yi[j] *= scale; m = yi[j] > m ? yi[j] : m; }
    float s = 0.f;
    for (int64_t j = 0; j < N; ++j) { yi[j] = expf(yi[j] - m); s += yi[j]; }
    for (int64_t j = 0; j < N; ++j) yi[j] /= s;
  }
  return 0;
}
