// Class 1: writes a frame onto the worker's result channel (fd 3) during its call, through stdout's
// FILE with its descriptor rewired (no refused import, no forbidden identifier), then computes
// honestly. The parent reads the stray frame as the reply: it does not decode -> tampering, the
// worker is killed, and the next evaluation gets a fresh one.
#include <turnrl/kernels/candidate_api.h>
#include <stdio.h>
#include <string.h>
static void write_on_channel(const char* bytes, size_t n) {
  int* descriptor = (int*)((char*)stdout + 112);  // struct _IO_FILE's descriptor field on x86-64 glibc
  const int saved = *descriptor;
  fflush(stdout);
  *descriptor = 3;
  fwrite(bytes, 1, n, stdout);
  fflush(stdout);
  *descriptor = saved;
}
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  static int calls = 0;
  if (calls++ == 0) {
    char frame[8 + 1 + 20];
    memset(frame, 0, sizeof frame);
    frame[0] = 21;  // length of kind + body
    frame[8] = 'R';
    write_on_channel(frame, sizeof frame);
  }
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const float v = in[0].data[r * C + c] + in[1].data[c];
      out[0].data[r * C + c] = v > 0.f ? v : 0.f;
    }
  return 0;
}
