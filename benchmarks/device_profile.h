#pragma once
// Where a benchmark's time goes, without nsys (the GPU machine has none): runs a function under
// LibTorch's Kineto profiler and prints the kernels (GPU) or operators (CPU) that took the most
// time, each with its total, its calls and its share of the whole. Kernels replayed from CUDA
// graphs are listed like any other.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join lives here from fmt 11 on
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/types.h>
#include <torch/version.h>

#include "bench_util.h"

namespace turnrl::bench {

// A kernel name short enough for one line: LibTorch's elementwise kernels are long templates whose
// first 85 characters are alike (at::native::elementwise_kernel<128, 4, ...>), so a cut name is
// followed by the functions named inside it (direct_copy_kernel_cuda, CUDAFunctor_add, ...), which
// tell the kernels apart.
inline std::string short_activity_name(const std::string& name) {
  if (name.size() <= 88) return name;
  static const std::regex inner(R"(at::native::(?:\(anonymous namespace\)::)?([A-Za-z_][A-Za-z_0-9]*))");
  static const std::set<std::string> generic = {
      "elementwise_kernel", "vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "gpu_kernel_impl",
      "gpu_kernel_impl_nocast", "index_elementwise_kernel", "TensorIteratorBase", "launch_kernel",
      "memory", "detail", "index_copy_kernel_impl", "reduce_kernel", "ReduceOp", "func_wrapper_t"};
  std::vector<std::string> found;
  for (auto it = std::sregex_iterator(name.begin(), name.end(), inner); it != std::sregex_iterator(); ++it) {
    const std::string word = (*it)[1].str();
    if (generic.count(word) == 0 && std::find(found.begin(), found.end(), word) == found.end()) found.push_back(word);
  }
  std::string out = name.substr(0, 85) + "...";
  if (!found.empty()) out += " [" + fmt::format("{}", fmt::join(found, ", ")) + "]";
  return out;
}

inline void print_device_profile(const char* title, const std::function<void()>& fn, torch::Device device,
                                 size_t top = 15) {
  namespace prof = torch::profiler::impl;
  namespace autograd_prof = torch::autograd::profiler;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
  if (device.is_cuda()) activities.insert(prof::ActivityType::CUDA);
  autograd_prof::prepareProfiler(config, activities);
  autograd_prof::enableProfiler(config, activities);
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  fn();
  synchronize(device);
  const double wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const std::unique_ptr<autograd_prof::ProfilerResult> result = autograd_prof::disableProfiler();
  // GPU: device activities (kernels, copies, memsets), shares of the device's busy time (their
  // sum; wall time beyond it is the device waiting for the host). CPU: the operators, shares of the
  // wall time; their times nest (an operator's includes the ones it calls), so shares overlap.
  struct Total {
    double us = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Total> by_name;
  double whole = 0;
  for (const auto& e : result->events()) {
    if ((e.deviceType() == c10::DeviceType::CUDA) != device.is_cuda()) continue;
#if TORCH_VERSION_MAJOR >= 2
    const double us = double(e.durationNs()) / 1000.0;
#else
    const double us = double(e.durationUs());
#endif
    Total& t = by_name[e.name()];
    t.us += us;
    ++t.calls;
    if (device.is_cuda()) whole += us;
  }
  std::vector<std::pair<std::string, Total>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  if (!device.is_cuda()) whole = wall_us;
  std::printf("profile: %s: %.0f us wall, %s%zu distinct %s\n", title, wall_us,
              device.is_cuda() ? fmt::format("{:.0f} us of device activity, ", whole).c_str() : "", rows.size(),
              device.is_cuda() ? "device activities" : "operators");
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const std::string name = short_activity_name(rows[i].first);
    std::printf("  %10.0f us %7ld calls %5.1f%%  %s\n", rows[i].second.us, long(rows[i].second.calls),
                whole > 0 ? 100 * rows[i].second.us / whole : 0.0, name.c_str());
  }
}

}  // namespace turnrl::bench
