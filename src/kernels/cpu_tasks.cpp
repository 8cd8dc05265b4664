#include "turnrl/kernels/cpu_tasks.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "trial_seeds.h"
#include "turnrl/core/error.h"

namespace turnrl {
namespace {

double flops_per_element(const ShapeSet& s, double per) { return per * double(numel(s[0])); }

at::Tensor gelu_tanh(const at::Tensor& x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + at::tanh(k * (x + 0.044715 * x * x * x)));
}

CpuTask make_task(std::string name, int level, std::string description, std::vector<InputSpec> inputs,
                  std::vector<ShapeSet> shape_sets, CpuReference reference) {
  CpuTask t;
  t.name = std::move(name);
  t.level = level;
  t.description = std::move(description);
  t.inputs = std::move(inputs);
  t.shape_sets = std::move(shape_sets);
  t.reference = std::move(reference);
  return t;
}

std::vector<CpuTask> builtin_tasks() {
  std::vector<CpuTask> t;
  // Level 1: elementwise and fused elementwise.
  t.push_back(make_task("relu_bias", 1, "y[r,c] = relu(x[r,c] + b[c]); x [R,C], b [C]",
               {{"x"}, {"b"}},
               {{{256, 512}, {512}}, {{33, 100}, {100}}, {{1, 7}, {7}}},
               [](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{at::relu(in[0] + in[1])}; }));
  t.back().flops = [](const ShapeSet& s) { return flops_per_element(s, 2); };
  t.push_back(make_task("gelu_tanh", 1, "y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); x [N]",
               {{"x", InputSpec::normal, 0.f, 2.f}},
               {{{1 << 17}}, {{1000}}, {{3}}},
               [](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{gelu_tanh(in[0])}; }));
  t.back().flops = [](const ShapeSet& s) { return flops_per_element(s, 10); };
  t.push_back(make_task("swiglu", 1, "y = a * sigmoid(a) * g; a, g [R,C]",
               {{"a"}, {"g"}},
               {{{256, 512}, {256, 512}}, {{17, 31}, {17, 31}}, {{2, 1}, {2, 1}}},
               [](const std::vector<at::Tensor>& in) {
                 return std::vector<at::Tensor>{in[0] * at::sigmoid(in[0]) * in[1]};
               }));
  t.back().flops = [](const ShapeSet& s) { return flops_per_element(s, 5); };
  // Level 2: reductions and softmax.
  t.push_back(make_task("softmax_rows", 2, "y[r,:] = softmax(x[r,:]); x [R,C]",
               {{"x", InputSpec::normal, 0.f, 3.f}},
               {{{256, 512}}, {{40, 77}}, {{3, 1}}},
               [](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{at::softmax(in[0], 1)}; }));
  t.back().replaces = {"softmax_rows"};
  t.back().flops = [](const ShapeSet& s) { return flops_per_element(s, 5); };
  t.push_back(make_task("layernorm_rows", 2,
               "y[r,:] = (x[r,:] - mean) / sqrt(var + 1e-5) * gamma + beta (biased var); x [R,C], gamma, beta [C]",
               {{"x", InputSpec::normal, 1.f, 2.f}, {"gamma", InputSpec::uniform, 0.5f, 1.5f}, {"beta"}},
               {{{256, 512}, {512}, {512}}, {{19, 65}, {65}, {65}}, {{2, 3}, {3}, {3}}},
               [](const std::vector<at::Tensor>& in) {
                 return std::vector<at::Tensor>{at::layer_norm(in[0], {in[0].size(1)}, in[1], in[2], 1e-5)};
               }));
  t.back().flops = [](const ShapeSet& s) { return flops_per_element(s, 8); };
  t.push_back(make_task("logsumexp_rows", 2, "y[r] = log(sum_c exp(x[r,c])); x [R,C], y [R]",
               {{"x", InputSpec::normal, 0.f, 4.f}},
               {{{512, 512}}, {{29, 50}}, {{1, 1}}},
               [](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{at::logsumexp(in[0], {1})}; }));
  t.back().flops = [](const ShapeSet& s) { return flops_per_element(s, 4); };
  // Level 3: matmul with an epilogue.
  t.push_back(make_task("matmul_bias_relu", 3, "y = relu(x @ w + b); x [M,K], w [K,N], b [N]",
               {{"x"}, {"w", InputSpec::normal, 0.f, 0.1f}, {"b"}},
               {{{128, 256}, {256, 128}, {128}}, {{13, 21}, {21, 9}, {9}}, {{1, 5}, {5, 3}, {3}}},
               [](const std::vector<at::Tensor>& in) {
                 return std::vector<at::Tensor>{at::relu(at::mm(in[0], in[1]) + in[2])};
               }));
  t.back().flops = [](const ShapeSet& s) { return 2.0 * double(s[0][0] * s[0][1] * s[1][1]); };
  t.push_back(make_task("matmul_softmax", 3, "y = softmax_rows((x @ w) / sqrt(K)); x [M,K], w [K,N]",
               {{"x"}, {"w"}},
               {{{64, 512}, {512, 128}}, {{10, 24}, {24, 15}}, {{2, 2}, {2, 1}}},
               [](const std::vector<at::Tensor>& in) {
                 const double scale = 1.0 / std::sqrt(double(in[0].size(1)));
                 return std::vector<at::Tensor>{at::softmax(at::mm(in[0], in[1]) * scale, 1)};
               }));
  t.back().flops = [](const ShapeSet& s) { return 2.0 * double(s[0][0] * s[0][1] * s[1][1]); };
  return t;
}

struct Registry {
  std::mutex mu;
  std::map<std::string, CpuTask> tasks;
  Registry() {
    for (auto& task : builtin_tasks()) tasks.emplace(task.name, std::move(task));
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0x9E3779B97F4A7C15ull);
  return splitmix64(s);
}

double unit(uint64_t& state) { return double(splitmix64(state) >> 11) * 0x1.0p-53; }

}  // namespace

void register_cpu_task(CpuTask task) {
  require(!task.name.empty() && task.reference && !task.shape_sets.empty(),
          "register_cpu_task: a task needs a name, a reference and at least one shape set");
  for (const auto& set : task.shape_sets)
    if (set.size() != task.inputs.size())
      fail("register_cpu_task '{}': a shape set has {} shapes for {} inputs", task.name, set.size(), task.inputs.size());
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.tasks[task.name] = std::move(task);
}

bool has_cpu_task(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.tasks.count(name) > 0;
}

const CpuTask& cpu_task(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.tasks.find(name);
  if (it == r.tasks.end()) {
    std::string known;
    for (const auto& [n, t] : r.tasks) known += (known.empty() ? "" : ", ") + n;
    fail("cpu task: unknown name '{}'; known: {}", name, known);
  }
  return it->second;
}

std::vector<std::string> cpu_task_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [n, t] : r.tasks) names.push_back(n);
  return names;
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t total_numel(const std::vector<Shape>& shapes) {
  int64_t n = 0;
  for (const Shape& s : shapes) n += numel(s);
  return n;
}

void fill_input(const InputSpec& spec, float* data, int64_t n, uint64_t seed, int input_index) {
  uint64_t state = mix(seed, uint64_t(input_index) + 1);
  if (spec.distribution == InputSpec::uniform) {
    for (int64_t i = 0; i < n; ++i) data[i] = float(spec.a + (spec.b - spec.a) * unit(state));
    return;
  }
  // Box-Muller, both values of each pair.
  for (int64_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(std::max(unit(state), 1e-300))), phi = 2.0 * M_PI * unit(state);
    data[i] = float(spec.a + spec.b * r * std::cos(phi));
    if (i + 1 < n) data[i + 1] = float(spec.a + spec.b * r * std::sin(phi));
  }
}

std::vector<at::Tensor> make_inputs(const CpuTask& task, int shape_set, uint64_t seed) {
  return make_inputs(task, task.shape_sets.at(size_t(shape_set)), seed);
}

std::vector<at::Tensor> make_inputs(const CpuTask& task, const ShapeSet& shapes, uint64_t seed) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor t = at::empty(shapes[i], at::kFloat);
    fill_input(task.inputs[i], t.data_ptr<float>(), t.numel(), seed, int(i));
    out.push_back(t);
  }
  return out;
}

void rewrite_tail(const CpuTask& task, float* const* data, const int64_t* n, uint64_t seed) {
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    const int64_t half = n[i] / 2;
    fill_input(task.inputs[i], data[i] + half, n[i] - half, mix(seed, 0xCAC4E), int(i));
  }
}

void rewrite_tail(const CpuTask& task, std::vector<at::Tensor>& inputs, uint64_t seed) {
  std::vector<float*> data;
  std::vector<int64_t> n;
  for (auto& t : inputs) data.push_back(t.data_ptr<float>()), n.push_back(t.numel());
  rewrite_tail(task, data.data(), n.data(), seed);
}

void perturb_for_timing(const float* const* base, float* const* data, const int64_t* n, int num_inputs, uint64_t seed,
                        int trial) {
  for (int i = 0; i < num_inputs; ++i) {
    uint64_t state = mix(mix(seed, uint64_t(trial) + 7), uint64_t(i));
    // Every element, by a factor in [0.75, 1.25) (signs, zeros and the input's range kept): a
    // candidate that keeps the last call's inputs and result finds everything changed. With a few
    // changed places, a kept matmul result updated by rank-1 corrections was 8.6x faster, exactly.
    for (int64_t k = 0; k < n[i]; ++k) data[i][k] = base[i][k] * float(0.75 + 0.5 * unit(state));
  }
}

void perturb_for_timing(const std::vector<at::Tensor>& base, std::vector<at::Tensor>& inputs, uint64_t seed,
                        int trial) {
  std::vector<const float*> from;
  std::vector<float*> to;
  std::vector<int64_t> n;
  for (size_t k = 0; k < inputs.size(); ++k) {
    require(base[k].numel() == inputs[k].numel() && base[k].is_contiguous() && inputs[k].is_contiguous(),
            "perturb_for_timing: base and inputs differ in size or layout");
    from.push_back(base[k].data_ptr<float>()), to.push_back(inputs[k].data_ptr<float>()), n.push_back(inputs[k].numel());
  }
  perturb_for_timing(from.data(), to.data(), n.data(), int(inputs.size()), seed, trial);
}

ShapeSet random_shape_set(const CpuTask& task, uint64_t seed, bool larger) {
  return random_shape_set(task.shape_sets, seed, larger);
}

ShapeSet random_shape_set(const std::vector<ShapeSet>& shape_sets, uint64_t seed, bool larger) {
  const ShapeSet& shown = shape_sets.at(0);
  // Dimensions whose sizes agree in every shape set of the task are one size (x [R,C] and b [C]
  // share C): the value drawn for the first of them serves them all.
  std::vector<std::pair<size_t, size_t>> firsts;  // (input, dim) of each class's first member
  std::vector<int64_t> drawn;
  uint64_t state = mix(seed, larger ? 0x1A46E : 0x5A11);
  ShapeSet out = shown;
  for (size_t i = 0; i < shown.size(); ++i)
    for (size_t d = 0; d < shown[i].size(); ++d) {
      size_t k = 0;
      for (; k < firsts.size(); ++k) {
        bool same = true;
        for (const auto& set : shape_sets)
          same = same && set[i].size() == shown[i].size() && set[firsts[k].first].size() > firsts[k].second &&
                 set[i][d] == set[firsts[k].first][firsts[k].second];
        if (same) break;
      }
      if (k == firsts.size()) {
        drawn.push_back(eval_detail::random_check_size(shown[i][d], larger, state));
        firsts.emplace_back(i, d);
      }
      out[i][d] = drawn[k];
    }
  return out;
}

double bytes_moved(const ShapeSet& inputs, const std::vector<Shape>& outputs) {
  return 4.0 * (double(total_numel(inputs)) + double(total_numel(outputs)));
}

}  // namespace turnrl
