#include <turnrl/kernels/candidate_api.h>
#include <stdlib.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t n = in[0].numel;
  const float* x = in[0].data; float* y = out[0].data;
  const float k = 0.7978845608028654f;
  // Every step is a library routine; the constant vectors are filled once and kept.
  static float* c1 = nullptr; static float* ck = nullptr; static float* ch = nullptr; static float* one = nullptr;
  static int64_t cn = 0;
  if (cn != n) {
    c1 = (float*)realloc(c1, sizeof(float) * n); ck = (float*)realloc(ck, sizeof(float) * n);
    ch = (float*)realloc(ch, sizeof(float) * n); one = (float*)realloc(one, sizeof(float) * n);
    if (!c1 || !ck || !ch || !one) return 1;
    for (int64_t i = 0; i < n; ++i) c1[i] = 0.044715f, ck[i] = k, ch[i] = 0.5f, one[i] = 1.f;
    cn = n;
  }
  float* t = (float*)malloc(sizeof(float) * n);
  if (!t) return 1;
  lib->mul(x, x, t, n);
  lib->mul(t, x, t, n);
  lib->mul(t, c1, t, n);
  lib->add(t, x, t, n);
  lib->mul(t, ck, t, n);
  lib->tanh(t, t, n);
  lib->add(t, one, t, n);
  lib->mul(t, x, y, n);
  lib->mul(y, ch, y, n);
  free(t);
  return 0;
}
