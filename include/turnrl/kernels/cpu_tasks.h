#pragma once
// Tasks of the CPU backend: a LibTorch CPU reference registered by name, plus input specs.
// Inputs are float32 and generated from a seed by a generator of turnrl's own (splitmix64 +
// Box-Muller), so that the parent (which computes the reference outputs) and the sandboxed worker
// (which runs the candidate) build bit-identical inputs without shipping them.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "turnrl/core/random.h"

namespace turnrl {

using Shape = std::vector<int64_t>;
using ShapeSet = std::vector<Shape>;  // one shape per input

// How one input's values are drawn: normal(a, b) (mean, std) or uniform[a, b).
struct InputSpec {
  enum Distribution { normal, uniform };
  std::string name;
  Distribution distribution = normal;
  float a = 0.f, b = 1.f;
};

using CpuReference = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

struct CpuTask {
  std::string name;
  int level = 1;  // 1 elementwise/fused, 2 reductions & softmax, 3 matmul with epilogue
  std::string description;
  std::vector<InputSpec> inputs;
  // shape_sets[0] is the shape the prompt shows (correctness and timing); the others are the
  // extra shapes of the specialisation check.
  std::vector<ShapeSet> shape_sets;
  CpuReference reference;
  // Correctness tolerances; the defaults are the reference evaluator's (atol = rtol = 1e-2).
  double atol = 1e-2, rtol = 1e-2;
  // The tighter tolerance of the precision-downgrade check: an honest float32 kernel meets it.
  double precision_atol = 1e-4, precision_rtol = 1e-4;
  // Library routines (candidate_api.h names) that compute the whole task: calling one is
  // calls_reference.
  std::vector<std::string> replaces;
  // Floating-point operations for a shape set (the compute bound of the plausibility check).
  std::function<double(const ShapeSet&)> flops;
};

// Registry. Built-in tasks are registered on first use; register_cpu_task adds or replaces one.
void register_cpu_task(CpuTask task);
const CpuTask& cpu_task(const std::string& name);  // throws turnrl::Error naming the known tasks
bool has_cpu_task(const std::string& name);
std::vector<std::string> cpu_task_names();

// Deterministic inputs: input i of shape_sets[set] from (seed, i).
void fill_input(const InputSpec& spec, float* data, int64_t n, uint64_t seed, int input_index);
std::vector<at::Tensor> make_inputs(const CpuTask& task, int shape_set, uint64_t seed);
std::vector<at::Tensor> make_inputs(const CpuTask& task, const ShapeSet& shapes, uint64_t seed);
// An extra shape set drawn from seed for the specialisation check: every size of shape_sets[0]
// replaced by a prime above it (the first after a random point up to a quarter above; larger) or
// by an odd size under 64; sizes that agree
// in all of the task's shape sets get the same draw. Different every evaluation.
ShapeSet random_shape_set(const CpuTask& task, uint64_t seed, bool larger);
// The same over any task's shape sets (shape_sets[0] the shown one): the CUDA backend's too.
ShapeSet random_shape_set(const std::vector<ShapeSet>& shape_sets, uint64_t seed, bool larger);
// The cache check: rewrites the second half of every input in place (first half kept).
void rewrite_tail(const CpuTask& task, float* const* data, const int64_t* numel, uint64_t seed);
void rewrite_tail(const CpuTask& task, std::vector<at::Tensor>& inputs, uint64_t seed);
// Timing trial `trial`'s inputs: every element of `base` times its own factor in [0.75, 1.25), drawn
// from (seed, trial, input, element), written to `data`. Stateless (trial k needs no trial before
// it), and no element stays what it was in another trial, so that content-keyed caches miss and
// incremental recomputation from a kept copy saves nothing.
void perturb_for_timing(const float* const* base, float* const* data, const int64_t* numel, int num_inputs,
                        uint64_t seed, int trial);
void perturb_for_timing(const std::vector<at::Tensor>& base, std::vector<at::Tensor>& inputs, uint64_t seed,
                        int trial);

// Bytes a kernel must at least move (inputs read once, outputs written once).
double bytes_moved(const ShapeSet& inputs, const std::vector<Shape>& outputs);
int64_t numel(const Shape& shape);
int64_t total_numel(const std::vector<Shape>& shapes);  // elements of all the tensors together

}  // namespace turnrl
