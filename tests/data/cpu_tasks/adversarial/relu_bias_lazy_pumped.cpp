// Class 5: the lazy relu_bias (both steps in the library) plus useless work of its own, several
// times the library's time, so that the share of the call spent in its own code rises far above
// the lazy threshold. Caught: laziness is judged by the library's time against the reference's
// time, which busy work does not change -> lazy, and a reward no higher than the plain lazy one's.
#include <turnrl/kernels/candidate_api.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  lib->add_bias_rows(in[0].data, in[1].data, out[0].data, R, C);
  lib->relu(out[0].data, out[0].data, R * C);
  volatile float sink = 0.f;
  float acc = 0.f;
  for (int pass = 0; pass < 24; ++pass)
    for (int64_t i = 0; i < R * C; ++i) acc = acc * 0.999f + in[0].data[i];
  sink = acc;
  (void)sink;
  return 0;
}
