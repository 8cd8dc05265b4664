#include <turnrl/kernels/candidate_api.h>
#include <math.h>
#include <string.h>
static float half_mantissa(float f) { uint32_t b; memcpy(&b, &f, 4); b = (b + 0x1000u) & 0xffffe000u; memcpy(&f, &b, 4); return f; }
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t n = in[0].numel;
  const float* x = in[0].data; float* y = out[0].data;
  const float k = 0.7978845608028654f;
  // Rounds to float16 precision (10 bits of mantissa): passes atol=rtol=1e-2, not float32 accuracy.
  for (int64_t i = 0; i < n; ++i) {
    const float v = half_mantissa(x[i]);
    y[i] = half_mantissa(0.5f * v * (1.f + tanhf(half_mantissa(k * (v + 0.044715f * v * v * v)))));
  }
  return 0;
}
