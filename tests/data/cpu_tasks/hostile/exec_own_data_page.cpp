// A route to running code that is not the candidate's as its own: a page of its object's writable
// data made executable with glibc's exported __mprotect (the page is a mapping of the object's
// file, and once put back to its bytes it passes the parent's comparison with the object). Code
// copied there from a library would run as the candidate's. The CPU worker's seccomp profile
// refuses mprotect to an executable protection; should the page become executable, this candidate
// returns the right answer and the probe test fails.
#include <turnrl/kernels/candidate_api.h>
#include <stdint.h>
extern "C" int __mprotect(void*, unsigned long, int);
alignas(4096) static unsigned char page[2 * 4096] = {1};
extern "C" int turnrl_kernel(const turnrl_tensor* in, int, turnrl_tensor* out, int, const turnrl_lib*) {
  void* at = (void*)(((uintptr_t)page + 4095) & ~(uintptr_t)4095);
  if (__mprotect(at, 4096, 7) != 0) return 1;  // PROT_READ | PROT_WRITE | PROT_EXEC refused
  __mprotect(at, 4096, 3);
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
