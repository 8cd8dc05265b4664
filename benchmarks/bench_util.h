#pragma once
// Shared benchmark plumbing: device choice from the command line, a synchronising timer that
// reports the median of repeated runs, and the machine's measured memory bandwidth (the bound
// every bandwidth-limited kernel is compared against, measured in the same run).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/types.h>

namespace turnrl::bench {

struct Args {
  torch::Device device = torch::kCPU;
  bool quick = false;    // smaller sizes, fewer repetitions (smoke runs)
  bool profile = false;  // where the time goes (device_profile.h), in the benchmarks that print it
  std::string cases;     // --cases: only these of a benchmark's cases, comma-separated (those that take it say how)
};

inline Args parse_args(int argc, char** argv) {
  // Line-buffered even into a pipe (device scripts tee the output): a benchmark stopped by a time
  // limit still leaves the rows it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      a.device = torch::Device(argv[++i]);
    } else if (!std::strcmp(argv[i], "--quick")) {
      a.quick = true;
    } else if (!std::strcmp(argv[i], "--profile")) {
      a.profile = true;
    } else if (!std::strcmp(argv[i], "--cases") && i + 1 < argc) {
      a.cases = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda] [--quick] [--profile] [--cases LIST]\n", argv[0]);
      std::exit(2);
    }
  }
  if (a.device.is_cuda() && !at::hasCUDA()) {
    std::fprintf(stderr, "--device cuda: this LibTorch has no CUDA or no GPU is visible\n");
    std::exit(2);
  }
  return a;
}

inline void synchronize(const torch::Device& device) {
  if (device.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(device.index() < 0 ? 0 : device.index());
}

// Median wall time in seconds of fn(), synchronised, after warm-up; repeats until min_seconds
// of samples or max_reps.
inline double median_seconds(const std::function<void()>& fn, const torch::Device& device, double min_seconds = 0.2,
                             int max_reps = 200, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) fn();
  synchronize(device);
  std::vector<double> samples;
  double total = 0;
  while ((total < min_seconds || samples.size() < 5) && int(samples.size()) < max_reps) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    synchronize(device);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    samples.push_back(dt);
    total += dt;
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

// Read+write bandwidth in bytes/s of a large device-to-device copy (256 MiB each way).
inline double copy_bandwidth(const torch::Device& device) {
  const int64_t n = int64_t(256) << 20;
  torch::Tensor src = at::ones({n}, at::TensorOptions(at::kByte).device(device));
  torch::Tensor dst = at::empty_like(src);
  const double t = median_seconds([&] { dst.copy_(src); }, device, 0.5, 50, 2);
  return 2.0 * double(n) / t;
}

inline std::string human_time(double seconds) {
  char buf[32];
  if (seconds < 1e-3) std::snprintf(buf, sizeof buf, "%.1f us", seconds * 1e6);
  else if (seconds < 1) std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  else std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  return buf;
}

}  // namespace turnrl::bench
