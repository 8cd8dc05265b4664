// Calls outside the candidate profile's allow-list, through libc wrappers that the import check
// lets through (kernel attack surface no kernel needs: device nodes, System V message queues and
// shared memory, personality flags). Each must answer ENOSYS; then the candidate gives up. Should
// any work, it returns the right answer instead, and the probe test fails because the evaluation
// was correct.
#include <turnrl/kernels/candidate_api.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/personality.h>
#include <sys/shm.h>
#include <sys/stat.h>
static int refused(long rc) { return rc == -1 && errno == ENOSYS; }
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const int all_refused = refused(mknodat(AT_FDCWD, "fifo", S_IFIFO | 0600, 0)) && refused(msgget(IPC_PRIVATE, 0600)) &&
                          refused(shmget(IPC_PRIVATE, 4096, 0600)) && refused(personality(0xffffffffUL));
  if (all_refused) return 1;
  // relu(x + b), the right answer: reached only when a call got through.
  const int64_t cols = in[1].numel;
  for (int64_t i = 0; i < in[0].numel; ++i) {
    const float v = in[0].data[i] + in[1].data[i % cols];
    out[0].data[i] = v > 0 ? v : 0;
  }
  return 0;
}
