// Routes to the worker's own code and channel, which share the candidate's process: writing the
// code of a library routine through /proc/self/mem (the same bytes back: no mapping's protection
// needs to change for that write), making its page writable with __mprotect, putting a pipe in the
// place of the result channel (fd 3) with __dup2, and close_range over the channel. Patched marks or
// a swapped channel would let a lazy candidate hide its library calls. Each must fail; should any
// work, the candidate returns the right answer instead, and the probe test fails because the
// evaluation was correct.
#include <turnrl/kernels/candidate_api.h>
#include <fcntl.h>
#include <stdint.h>
extern "C" int __open(const char*, int, ...);
extern "C" long __pread64(int, void*, unsigned long, long);
extern "C" long __pwrite64(int, const void*, unsigned long, long);
extern "C" int __mprotect(void*, unsigned long, int);
extern "C" int __dup2(int, int);
extern "C" int __fcntl(int, int, ...);
extern "C" int __pipe(int*);
extern "C" int close_range(unsigned, unsigned, int);
static int open_routes(const void* code) {
  int open = 0;
  const char path[] = {'/', 'p', 'r', 'o', 'c', '/', 's', 'e', 'l', 'f', '/', 'm', 'e', 'm', 0};
  const int mem = __open(path, O_RDWR);
  unsigned char bytes[16];
  if (mem >= 0 && __pread64(mem, bytes, sizeof bytes, (long)(uintptr_t)code) == sizeof bytes &&
      __pwrite64(mem, bytes, sizeof bytes, (long)(uintptr_t)code) == sizeof bytes)
    ++open;
  const uintptr_t page = (uintptr_t)code & ~(uintptr_t)4095;
  if (__mprotect((void*)page, 4096, 7) == 0) ++open;  // PROT_READ | PROT_WRITE | PROT_EXEC
  int pipe_fds[2];
  const int saved = __fcntl(3, F_DUPFD_CLOEXEC, 50);
  if (saved >= 0 && __pipe(pipe_fds) == 0 && __dup2(pipe_fds[1], 3) == 3) {
    ++open;
    __dup2(saved, 3);
  }
  if (close_range(3, 3, 4 /* CLOSE_RANGE_CLOEXEC: sets a flag, closes nothing */) == 0) ++open;
  return open;
}
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  if (open_routes((const void*)lib->matmul) == 0) return 1;
  // relu(x + b), the right answer: reached only when a route was open.
  const int64_t cols = in[1].numel;
  for (int64_t i = 0; i < in[0].numel; ++i) {
    const float v = in[0].data[i] + in[1].data[i % cols];
    out[0].data[i] = v > 0 ? v : 0;
  }
  return 0;
}
