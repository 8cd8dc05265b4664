#pragma once
// Internal to the evaluator backends (cpu, cuda, python): the seeds of one evaluation's trials.
// request.seed == 0 draws them from a source the candidate cannot predict (so it cannot precompute
// its inputs); any other seed gives a reproducible sequence.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

#include "turnrl/kernels/cpu_tasks.h"  // splitmix64

namespace turnrl::eval_detail {

class TrialSeeds {
 public:
  explicit TrialSeeds(uint64_t seed) : state_(seed) {
    if (seed == 0) {
      std::random_device rd;
      state_ = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    }
  }
  // Never 0: workers read a 0 seed as "none".
  uint64_t next() {
    const uint64_t s = splitmix64(state_);
    return s ? s : 1;
  }

 private:
  uint64_t state_;
};

// A size for the shape-specialisation checks, drawn from state. larger: the first prime after a
// random point up to a quarter (at least 8) above `shown`; otherwise an odd size under 64 (and not
// above `shown` when that is smaller). Prime gaps at these sizes are a few dozen.
inline int64_t random_check_size(int64_t shown, bool larger, uint64_t& state) {
  const auto draw = [&](int64_t lo, int64_t hi) {
    return lo + int64_t(splitmix64(state) % uint64_t(std::max<int64_t>(1, hi - lo + 1)));
  };
  if (!larger) return draw(1, std::min<int64_t>(std::max<int64_t>(shown, 2), 63)) | 1;
  const auto is_prime = [](int64_t v) {
    if (v < 2) return false;
    for (int64_t d = 2; d * d <= v; ++d)
      if (v % d == 0) return false;
    return true;
  };
  int64_t v = draw(shown + 1, shown + std::max<int64_t>(8, shown / 4));
  while (!is_prime(v)) ++v;
  return v;
}

}  // namespace turnrl::eval_detail
