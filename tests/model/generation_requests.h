#pragma once
// Requests and comparisons shared by the generation engine's CPU and CUDA tests.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "turnrl/model/generation_engine.h"

namespace turnrl::test {

inline double max_gap(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double gap = 0;
  for (size_t i = 0; i < a.size(); ++i) gap = std::max(gap, double(std::abs(a[i] - b[i])));
  return gap;
}

inline void check_same(const GenerationResult& got, const GenerationResult& want) {
  CHECK(got.tokens == want.tokens);
  CHECK(got.stopped == want.stopped);
  if (got.tokens == want.tokens) CHECK(max_gap(got.logp, want.logp) < 1e-4);
}

// Ragged requests with their own options: greedy, plain sampling, top-k, top-p, both, a stop token.
inline std::vector<GenerationRequest> mixed_requests() {
  const SamplingOptions sampled = SamplingOptions().max_new(9).temp(1.0);
  return {
      GenerationRequest().prompt({5, 6, 7}).options(SamplingOptions(sampled).temp(0)).stream(1),
      GenerationRequest().prompt({9, 10, 11, 12, 13, 14, 15, 16}).options(SamplingOptions(sampled).max_new(14)).stream(2),
      GenerationRequest().prompt({3}).options(SamplingOptions(sampled).topk(5).temp(0.7)).stream(3),
      GenerationRequest().prompt({20, 21, 22, 23, 24}).options(SamplingOptions(sampled).topp(0.8).max_new(4)).stream(4),
      GenerationRequest().prompt({30, 31}).options(SamplingOptions(sampled).topk(8).topp(0.9).max_new(12)).stream(5),
      GenerationRequest().prompt({40, 41, 42, 43}).options(SamplingOptions(sampled).stop({1, 2, 3, 4, 5, 6, 7, 8})).stream(6),
  };
}

}  // namespace turnrl::test
