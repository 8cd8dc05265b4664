#pragma once
// Tasks of the CUDA backend: a LibTorch reference on CUDA tensors registered by name, the input
// specs, the shapes, and the launch contract of candidates (cuda_launch.h): the kernel's
// parameter list and how the grid follows from the task's sizes. The same eight problems as the
// CPU suite (levels 1-3), at sizes where a GPU kernel's time is not just launch overhead.
// No CUDA headers here: the registry is plain C++ + ATen, so the contract is testable anywhere.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "turnrl/kernels/cpu_tasks.h"  // Shape, ShapeSet, InputSpec

namespace turnrl {

// How the evaluator sizes the grid of a single-kernel candidate (cuda_launch.h).
enum class CudaGridKind {
  elementwise,  // grid.x = ceil(n / items per block), n = product of dims (all elements)
  rows,         // grid.x = ceil(rows / rows per block), rows = dims[0]
  matrix,       // grid = (ceil(N / cols per block), ceil(M / rows per block)), M = dims[0], N = dims[1]
};

using CudaReference = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

struct CudaTask {
  std::string name;
  int level = 1;  // 1 elementwise/fused, 2 reductions & softmax, 3 matmul with epilogue
  std::string description;
  std::vector<InputSpec> inputs;
  std::vector<std::string> outputs;  // output names, in kernel-parameter order
  // shape_sets[0] is the shape the prompt shows (correctness and timing); the others are the
  // extra shapes of the specialisation check.
  std::vector<ShapeSet> shape_sets;
  // The integer size parameters the kernel receives after its pointers, and their values for a
  // shape set (e.g. rows, cols).
  std::vector<std::string> dim_names;
  std::function<std::vector<int64_t>(const ShapeSet&)> dims;
  CudaGridKind grid = CudaGridKind::elementwise;
  CudaReference reference;  // runs on the inputs' device (CUDA in the worker)
  double atol = 1e-2, rtol = 1e-2;                     // the reference evaluator's defaults
  double precision_atol = 1e-4, precision_rtol = 1e-4;  // honest float32 meets these
  std::function<double(const ShapeSet&)> flops;         // the compute bound of the plausibility check
};

// Registry: built-in tasks on first use; register_cuda_task adds or replaces one.
void register_cuda_task(CudaTask task);
const CudaTask& cuda_task(const std::string& name);  // throws naming the known tasks
bool has_cuda_task(const std::string& name);
std::vector<std::string> cuda_task_names();

// The kernel declaration a single-kernel candidate must define, e.g.
//   extern "C" __global__ void turnrl_kernel(const float* x, const float* b, float* y, int rows, int cols)
std::string cuda_kernel_signature(const CudaTask& task);

}  // namespace turnrl
