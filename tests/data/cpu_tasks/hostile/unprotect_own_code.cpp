// A route to the candidate's own code after it is loaded: its code page made writable with glibc's
// exported __mprotect, so that a call could run other code in its place and put the bytes back
// before the parent compares the sampled code with the object (a red-team probe ran foreign code
// as its own that way). The worker seals the object's code once it is loaded; should the page
// become writable, this candidate returns the right answer and the probe test fails.
#include <turnrl/kernels/candidate_api.h>
#include <stdint.h>
extern "C" int __mprotect(void*, unsigned long, int);
extern "C" int turnrl_kernel(const turnrl_tensor* in, int, turnrl_tensor* out, int, const turnrl_lib*) {
  const uintptr_t page = (uintptr_t)&turnrl_kernel & ~(uintptr_t)4095;
  if (__mprotect((void*)page, 4096, 7) != 0) return 1;  // PROT_READ | PROT_WRITE | PROT_EXEC refused
  __mprotect((void*)page, 4096, 5);
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const float* x = in[0].data;
  const float* b = in[1].data;
  float* y = out[0].data;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const float v = x[r * C + c] + b[c];
      y[r * C + c] = v > 0.f ? v : 0.f;
    }
  return 0;
}
