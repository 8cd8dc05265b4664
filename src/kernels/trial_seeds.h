#pragma once
// Internal to the evaluator backends (cpu, cuda, python): the seeds of one evaluation's trials.
// request.seed == 0 draws them from a source the candidate cannot predict (so it cannot precompute
// its inputs); any other seed gives a reproducible sequence.
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

}  // namespace turnrl::eval_detail
