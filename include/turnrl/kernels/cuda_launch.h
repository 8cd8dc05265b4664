#pragma once
// The launch contract of CUDA candidates (docs/evaluator.md, "CUDA backend"). Two forms:
//
// * kernel form (compiled with NVRTC, launched by the evaluator): the source defines
//     extern "C" __global__ void turnrl_kernel(<inputs as const float*>, <outputs as float*>, <task dims as int>)
//   and may set its launch shape with integer #defines that the kernel can use as well:
//     TURNRL_BLOCK_X (256), TURNRL_BLOCK_Y (1)   threads per block
//     TURNRL_TILE_X (1), TURNRL_TILE_Y (1)       items per thread along x / y (grid divisors)
//     TURNRL_SHARED_BYTES (0)                    dynamic shared memory
//   The grid follows from the task's CudaGridKind (cuda_tasks.h).
// * launcher form (compiled with nvcc into a shared object, for candidates that launch several
//   kernels or call libraries): the source defines
//     extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs,
//                                  const long long* dims, cudaStream_t stream)
//   which enqueues its work on `stream` and returns 0 (non-zero: runtime error). cuBLAS is linked.
// Pure text processing: no CUDA headers.
#include <cstdint>
#include <string>
#include <vector>

#include "turnrl/kernels/cuda_tasks.h"

namespace turnrl {

enum class CudaCandidateForm { kernel, launcher };

struct CudaLaunchShape {
  int block_x = 256, block_y = 1;
  int tile_x = 1, tile_y = 1;
  int shared_bytes = 0;
};

struct CudaGrid {
  int64_t x = 1, y = 1;
};

// launcher when the source defines turnrl_launch, else kernel.
CudaCandidateForm cuda_candidate_form(const std::string& source);

// Reads the TURNRL_* #defines; throws turnrl::Error naming the macro and the allowed values
// (block_x * block_y in [1, 1024], tiles in [1, 4096], shared bytes in [0, 227 KiB]).
CudaLaunchShape parse_launch_shape(const std::string& source);

// The grid of a kernel-form candidate for the task's sizes.
CudaGrid cuda_grid(const CudaTask& task, const std::vector<int64_t>& dims, const CudaLaunchShape& shape);

// Names of the __global__ functions the source defines (the candidate's own kernels, which the
// profiler separates from library kernels).
std::vector<std::string> cuda_kernel_names(const std::string& source);

// True when a profiled kernel name (plain, or Itanium-mangled such as _Z9my_kernelPKfPfi, or a
// demangled "void my_kernel<128>(float const*, ...)") is one of `own`.
bool is_own_kernel(const std::string& profiled_name, const std::vector<std::string>& own);

}  // namespace turnrl
