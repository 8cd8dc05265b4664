// Gradient sums over ranks with the tcp communicator: 2 ranks as threads of this process on a
// loopback port, a transformer-like parameter list (~100 tensors: large matrices alternating
// with small biases and norms). GradientBuckets (25 MiB buckets: one collective per bucket)
// against the baseline of one all_reduce_sum per parameter, measured in the same run.
//   distributed_bench [--device cpu|cuda] [--quick] [--params N] [--floats M]
// --params/--floats measure one parameter list of N tensors and M floats in all instead of the
// default sizes.
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "bench_util.h"
#include "support/loopback.h"
#include "turnrl/rl/distributed.h"

using namespace turnrl;

namespace {

constexpr int64_t kBucketBytes = int64_t(25) << 20;

// Parameters of n tensors and about `floats` elements in all: every even one a matrix, every odd
// one a vector 1/32 of its size (a bias or a norm), each with a gradient (zeros: summing them
// again and again stays finite).
std::vector<torch::Tensor> parameters(int n, int64_t floats, const torch::Device& device) {
  const int64_t small = std::max<int64_t>(1, floats / n / 32);
  const int64_t large = std::max<int64_t>(1, (floats - small * (n / 2)) / ((n + 1) / 2));
  std::vector<torch::Tensor> params;
  for (int i = 0; i < n; ++i) {
    const int64_t size = i % 2 == 0 ? large : small;
    params.push_back(torch::zeros({size}, at::TensorOptions().device(device)).requires_grad_(true));
    params.back().mutable_grad() = torch::zeros({size}, at::TensorOptions().device(device));
  }
  return params;
}

// Two ranks of one world: rank 0 on the calling thread, rank 1 on its own, both running each
// job passed to run() (a collective needs both).
class TwoRanks {
 public:
  explicit TwoRanks(const torch::Device& device) {
    const int port = testing::free_loopback_port();
    std::exception_ptr failed;
    std::thread joiner([&] {
      try {
        comm_[1] = make_communicator({1, 2, 1, "127.0.0.1", port}, device, {"tcp", 60});
      } catch (...) {
        failed = std::current_exception();
      }
    });
    comm_[0] = make_communicator({0, 2, 0, "127.0.0.1", port}, device, {"tcp", 60});
    joiner.join();
    if (failed) std::rethrow_exception(failed);
    worker_ = std::thread([this] { serve(); });
  }
  ~TwoRanks() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    worker_.join();
  }

  Communicator& comm(int rank) { return *comm_[rank]; }

  void run(const std::function<void(int rank)>& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
      ++posted_;
    }
    changed_.notify_all();
    job(0);
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_ == posted_; });
    if (failed_) std::rethrow_exception(std::exchange(failed_, nullptr));
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || done_ != posted_; });
      if (stop_) return;
      lock.unlock();
      try {
        job_(1);
      } catch (...) {
        failed_ = std::current_exception();
      }
      lock.lock();
      ++done_;
      changed_.notify_all();
    }
  }

  std::unique_ptr<Communicator> comm_[2];
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void(int)> job_;
  int64_t posted_ = 0, done_ = 0;
  bool stop_ = false;
  std::exception_ptr failed_;
};

}  // namespace

int main(int argc, char** argv) {
  struct Size { int params; int64_t floats; };
  std::vector<char*> rest = {argv[0]};
  std::optional<Size> only;
  for (int i = 1; i < argc; ++i) {
    const bool params = !std::strcmp(argv[i], "--params"), floats = !std::strcmp(argv[i], "--floats");
    if ((params || floats) && i + 1 < argc) {
      if (!only) only = Size{100, 2000000};
      if (params)
        only->params = std::max(1, std::atoi(argv[++i]));
      else
        only->floats = std::max<int64_t>(1, std::atoll(argv[++i]));
    } else {
      rest.push_back(argv[i]);
    }
  }
  const bench::Args args = bench::parse_args(int(rest.size()), rest.data());
  std::vector<Size> sizes = only ? std::vector<Size>{*only}
                          : args.quick ? std::vector<Size>{{100, 200000}}
                                       : std::vector<Size>{{100, 200000}, {100, 2000000}, {100, 20000000}};

  std::printf("distributed_bench: 2 ranks (threads) over the tcp communicator on 127.0.0.1, %s tensors\n",
              args.device.str().c_str());
  std::printf("baseline: one all_reduce_sum per parameter, same run; buckets: GradientBuckets of %lld MiB\n\n",
              (long long)(kBucketBytes >> 20));
  std::printf("%7s %10s %8s | %14s %14s %8s | %10s\n", "params", "floats", "buckets", "per parameter", "bucketed",
              "speedup", "GB/s");

  TwoRanks ranks(args.device);
  for (const Size& size : sizes) {
    std::vector<torch::Tensor> params[2] = {parameters(size.params, size.floats, args.device),
                                            parameters(size.params, size.floats, args.device)};
    GradientBuckets buckets[2] = {GradientBuckets(params[0], kBucketBytes), GradientBuckets(params[1], kBucketBytes)};
    int64_t floats = 0;
    for (const auto& p : params[0]) floats += p.numel();
    const double min_seconds = args.quick ? 0.1 : 0.5;
    const int reps = args.quick ? 20 : 100;
    const double per_parameter = bench::median_seconds(
        [&] {
          ranks.run([&](int r) {
            for (auto& p : params[r]) ranks.comm(r).all_reduce_sum(p.mutable_grad());
          });
        },
        args.device, min_seconds, reps, 1);
    const double bucketed = bench::median_seconds(
        [&] { ranks.run([&](int r) { buckets[r].all_reduce_sum(ranks.comm(r)); }); }, args.device, min_seconds, reps,
        1);
    std::printf("%7d %10lld %8zu | %14s %14s %7.2fx | %10.2f\n", size.params, (long long)floats,
                buckets[0].bucket_count(), bench::human_time(per_parameter).c_str(),
                bench::human_time(bucketed).c_str(), per_parameter / bucketed, double(floats) * 4 / bucketed / 1e9);
  }
  std::printf("\nTimes are per all-reduce of every gradient (median). GB/s: gradient bytes / bucketed time.\n");
  return 0;
}
