// Class 6: computes the right answer, and also writes 6,000 floats past the end of its output
// (beyond the old fixed 4 KiB guard, where a write landed undetected). Caught: the guard bands
// have a random length and sit inside an inaccessible reservation, so the write either changes a
// guard (out_of_bounds_write) or faults (crash); it is never correct.
#include <turnrl/kernels/candidate_api.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const float v = in[0].data[r * C + c] + in[1].data[c];
      out[0].data[r * C + c] = v > 0.f ? v : 0.f;
    }
  out[0].data[R * C + 6000] = 1.f;
  return 0;
}
