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

// Requests that make overlapped decode steps (GenerationEngineOptions::overlap_steps) meet every
// case they handle: more requests than 4 slots, many ending on a stop token at different steps
// (67 of the fixtures' 320 tokens stop them), so that steps launched ahead carry rows that have
// already ended, waiting requests start in freed slots, and a kept sequence (the last request's)
// is extended by a second turn. Runs them twice (the second run replays graphs the first captured), then the second
// turn; the results in id order of the second run, the turn last.
inline std::vector<GenerationResult> run_overlap_scenario(const HFDecoder& model, bool overlap,
                                                          GenerationStats* stats) {
  std::vector<int64_t> stops;
  for (int64_t t = 0; t < 200; t += 3) stops.push_back(t);
  std::vector<GenerationRequest> requests = mixed_requests();
  for (int64_t i = 0; i < 6; ++i)
    requests.push_back(GenerationRequest()
                           .prompt({50 + i, 60 + i, 70 + i})
                           .options(SamplingOptions().max_new(20).temp(1.0).stop(stops))
                           .stream(100 + i));
  requests.back().kept();  // started last: no waiting request evicts it
  GenerationEngine engine(model, GenerationEngineOptions().slots(4).capacity(64).overlap_steps(overlap));
  std::vector<GenerationResult> results;
  for (int round = 0; round < 2; ++round) {
    for (const GenerationRequest& r : requests) engine.add(r);
    results = engine.run();
  }
  // A second turn of the second run's kept last request.
  std::vector<int64_t> turn2 = requests.back().tokens;
  turn2.insert(turn2.end(), results.back().tokens.begin(), results.back().tokens.end());
  turn2.insert(turn2.end(), {80, 81});
  engine.add(GenerationRequest()
                 .prompt(turn2)
                 .options(SamplingOptions().max_new(6).temp(1.0))
                 .stream(7)
                 .continues(results.back().id));
  results.push_back(engine.run().front());
  *stats = engine.stats();
  return results;
}

// Overlapped steps against one step at a time on the scenario above: the same tokens, log-probs
// and reused tokens, the same prefill work, and no fewer steps (the ones launched for rows that
// had just ended).
inline void check_overlap_equals_stepping(const HFDecoder& model) {
  GenerationStats overlapped_stats, stepped_stats;
  const std::vector<GenerationResult> overlapped = run_overlap_scenario(model, true, &overlapped_stats);
  const std::vector<GenerationResult> stepped = run_overlap_scenario(model, false, &stepped_stats);
  REQUIRE(overlapped.size() == stepped.size());
  int64_t stopped = 0;
  for (size_t i = 0; i < overlapped.size(); ++i) {
    INFO("request " << i);
    check_same(overlapped[i], stepped[i]);
    CHECK(overlapped[i].reused_tokens == stepped[i].reused_tokens);
    stopped += overlapped[i].stopped;
  }
  CHECK(overlapped.back().reused_tokens > 0);
  CHECK(stopped >= 3);  // the scenario meets rows that end on a stop token
  CHECK(overlapped_stats.prefilled_tokens == stepped_stats.prefilled_tokens);
  CHECK(overlapped_stats.decode_steps >= stepped_stats.decode_steps);
}

}  // namespace turnrl::test
