#include <turnrl/kernels/candidate_api.h>
#include <math.h>
#include <stdlib.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const float* x = in[0].data; float* y = out[0].data;
  // exp and the row sums in the library; only R logarithms are the candidate's.
  float* e = (float*)malloc(sizeof(float) * R * C);
  if (!e) return 1;
  lib->exp(x, e, R * C);
  lib->sum_rows(e, y, R, C);
  for (int64_t r = 0; r < R; ++r) y[r] = logf(y[r]);
  free(e);
  return 0;
}
