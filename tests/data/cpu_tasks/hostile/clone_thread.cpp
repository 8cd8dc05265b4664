// A second thread through glibc's exported __clone (no import check names it; pthread_create and
// std::thread are flagged as deferred work before loading): a CPU candidate is timed against a
// single-threaded reference, so its worker refuses every clone. Refused, the candidate gives up;
// should the thread start, it returns the right answer instead, and the probe test fails because
// the evaluation was correct.
#include <turnrl/kernels/candidate_api.h>
#include <linux/sched.h>
#include <sched.h>
#include <stdlib.h>
extern "C" int __clone(int (*fn)(void*), void* stack, int flags, void* arg, ...);
static int idle(void*) { return 0; }
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  static char* stack = (char*)malloc(1 << 16);
  static volatile int child_tid;
  child_tid = 1;
  const int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
                    CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID;
  if (__clone(idle, stack + (1 << 16) - 64, flags, nullptr, nullptr, nullptr, (int*)&child_tid) < 0) return 1;
  while (child_tid != 0) {
  }
  // relu(x + b), the right answer: reached only when the thread started.
  const int64_t cols = in[1].numel;
  for (int64_t i = 0; i < in[0].numel; ++i) {
    const float v = in[0].data[i] + in[1].data[i % cols];
    out[0].data[i] = v > 0 ? v : 0;
  }
  return 0;
}
