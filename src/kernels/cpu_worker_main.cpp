// turnrl_cpu_worker: the sandboxed process of the CPU evaluator backend (see sandbox.h,
// cpu_backend.h). Started by the library with fork+exec; speaks frames on fd 3.
#include "turnrl/kernels/cpu_protocol.h"

int main(int argc, char** argv) { return turnrl::cpu_detail::cpu_worker_main(argc, argv); }
