// Class 6: correct up to the shown shape's size, wrong beyond it (a kernel tuned for, and only
// tested at, the shapes it was shown). The task's own extra shapes are all smaller. Caught: every
// evaluation adds shapes drawn for it, one with prime sizes above the shown ones ->
// shape_specialisation.
#include <turnrl/kernels/candidate_api.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const int64_t rows = R > 256 ? 256 : R, cols = C > 512 ? 512 : C;
  for (int64_t i = 0; i < R * C; ++i) out[0].data[i] = 0.f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = in[0].data[r * C + c] + in[1].data[c];
      out[0].data[r * C + c] = v > 0.f ? v : 0.f;
    }
  return 0;
}
