// Writes a file outside from a load-time constructor, before any check of the kernel runs.
#include <turnrl/kernels/candidate_api.h>
#include <fstream>
__attribute__((constructor)) static void at_load() { std::ofstream("@OUT@/run/constructor_marker") << "x"; }
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  return 1;
}
