#include "turnrl/kernels/cuda_tasks.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "turnrl/core/error.h"

namespace turnrl {
namespace {

// A GPU task reuses the CPU task of the same name (reference, input distributions, flops,
// tolerances: LibTorch references run on any device) with GPU-sized shapes and a launch contract.
CudaTask from_cpu_task(const std::string& name, std::vector<ShapeSet> shape_sets, std::vector<std::string> outputs,
                       std::vector<std::string> dim_names, std::function<std::vector<int64_t>(const ShapeSet&)> dims,
                       CudaGridKind grid) {
  const CpuTask& cpu = cpu_task(name);
  CudaTask t;
  t.name = name;
  t.level = cpu.level;
  t.description = cpu.description;
  t.inputs = cpu.inputs;
  t.outputs = std::move(outputs);
  t.shape_sets = std::move(shape_sets);
  t.dim_names = std::move(dim_names);
  t.dims = std::move(dims);
  t.grid = grid;
  t.reference = cpu.reference;
  t.atol = cpu.atol, t.rtol = cpu.rtol;
  t.precision_atol = cpu.precision_atol, t.precision_rtol = cpu.precision_rtol;
  t.flops = cpu.flops;
  return t;
}

std::vector<int64_t> rows_cols(const ShapeSet& s) { return {s[0][0], s[0][1]}; }
std::vector<int64_t> matmul_dims(const ShapeSet& s) { return {s[0][0], s[1][1], s[0][1]}; }  // M, N, K

std::vector<CudaTask> builtin_tasks() {
  using G = CudaGridKind;
  std::vector<CudaTask> t;
  // Level 1: elementwise. Main shapes move 128-192 MiB, so a kernel runs for tens of microseconds.
  t.push_back(from_cpu_task("relu_bias", {{{4096, 4096}, {4096}}, {{33, 100}, {100}}, {{1, 7}, {7}}}, {"y"},
                            {"rows", "cols"}, rows_cols, G::elementwise));
  t.push_back(from_cpu_task("gelu_tanh", {{{1 << 24}}, {{1000}}, {{3}}}, {"y"}, {"n"},
                            [](const ShapeSet& s) { return std::vector<int64_t>{s[0][0]}; }, G::elementwise));
  t.push_back(from_cpu_task("swiglu", {{{4096, 4096}, {4096, 4096}}, {{17, 31}, {17, 31}}, {{2, 1}, {2, 1}}}, {"y"},
                            {"rows", "cols"}, rows_cols, G::elementwise));
  // Level 2: row reductions.
  t.push_back(from_cpu_task("softmax_rows", {{{8192, 2048}}, {{40, 77}}, {{3, 1}}}, {"y"}, {"rows", "cols"}, rows_cols,
                            G::rows));
  t.push_back(from_cpu_task("layernorm_rows", {{{8192, 2048}, {2048}, {2048}}, {{19, 65}, {65}, {65}}, {{2, 3}, {3}, {3}}},
                            {"y"}, {"rows", "cols"}, rows_cols, G::rows));
  t.push_back(from_cpu_task("logsumexp_rows", {{{16384, 1024}}, {{29, 50}}, {{1, 1}}}, {"y"}, {"rows", "cols"},
                            rows_cols, G::rows));
  // Level 3: matmul with an epilogue (reference in full float32: LibTorch leaves TF32 off for matmul).
  t.push_back(from_cpu_task("matmul_bias_relu",
                            {{{2048, 1024}, {1024, 2048}, {2048}}, {{13, 21}, {21, 9}, {9}}, {{1, 5}, {5, 3}, {3}}}, {"y"},
                            {"M", "N", "K"}, matmul_dims, G::matrix));
  t.push_back(from_cpu_task("matmul_softmax", {{{2048, 512}, {512, 1024}}, {{10, 24}, {24, 15}}, {{2, 2}, {2, 1}}},
                            {"y"}, {"M", "N", "K"}, matmul_dims, G::rows));
  return t;
}

struct Registry {
  std::mutex mu;
  std::map<std::string, CudaTask> tasks;
  Registry() {
    for (auto& task : builtin_tasks()) tasks.emplace(task.name, std::move(task));
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_cuda_task(CudaTask task) {
  require(!task.name.empty() && task.reference && task.dims && !task.shape_sets.empty() && !task.outputs.empty(),
          "register_cuda_task: a task needs a name, a reference, dims, outputs and at least one shape set");
  for (const auto& set : task.shape_sets) {
    if (set.size() != task.inputs.size())
      fail("register_cuda_task '{}': a shape set has {} shapes for {} inputs", task.name, set.size(), task.inputs.size());
    if (task.dims(set).size() != task.dim_names.size())
      fail("register_cuda_task '{}': dims() gives {} values for {} dim_names", task.name, task.dims(set).size(),
           task.dim_names.size());
  }
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.tasks[task.name] = std::move(task);
}

bool has_cuda_task(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.tasks.count(name) > 0;
}

const CudaTask& cuda_task(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.tasks.find(name);
  if (it == r.tasks.end()) {
    std::vector<std::string> known;
    for (const auto& [n, t] : r.tasks) known.push_back(n);
    fail("cuda task: unknown name '{}'; known: {}", name, fmt::join(known, ", "));
  }
  return it->second;
}

std::vector<std::string> cuda_task_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [n, t] : r.tasks) names.push_back(n);
  return names;
}

std::string cuda_kernel_signature(const CudaTask& task) {
  std::vector<std::string> params;
  for (const auto& in : task.inputs) params.push_back("const float* " + in.name);
  for (const auto& out : task.outputs) params.push_back("float* " + out);
  for (const auto& d : task.dim_names) params.push_back("int " + d);
  return fmt::format("extern \"C\" __global__ void turnrl_kernel({})", fmt::join(params, ", "));
}

}  // namespace turnrl
