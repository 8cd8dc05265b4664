// Starts 64 processes (a bounded fork bomb: enough to show whether process creation is refused).
#include <turnrl/kernels/candidate_api.h>
#include <unistd.h>
extern "C" pid_t _Fork(void);
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  for (int k = 0; k < 64; ++k)
    if (_Fork() == 0) {
      for (volatile unsigned long i = 0; i < 4000000000ul; ++i) {
      }
      _exit(0);
    }
  return 1;
}
