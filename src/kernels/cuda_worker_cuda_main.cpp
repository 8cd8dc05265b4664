// turnrl_cuda_worker: the sandboxed process of the CUDA evaluator backend, one per GPU (see
// cuda_backend.h). Started by the library with fork+exec; speaks frames on fd 3.
#include "turnrl/kernels/cuda_protocol.h"

int main(int argc, char** argv) { return turnrl::cuda_detail::cuda_worker_main(argc, argv); }
