// Per-turn returns: hand-checked values from research §1.4 and §9, and the scalar reference.
#include <catch2/catch.hpp>

#include "support/batches.h"
#include "turnrl/algo/returns.h"
#include "turnrl/core/error.h"

using namespace turnrl;
using turnrl::reference::Turn;
using turnrl::testing::random_rows;
using turnrl::testing::to_batch;
using turnrl::testing::to_vector;

namespace {
std::vector<double> returns_of(const std::vector<double>& rewards, const ReturnOptions& o) {
  std::vector<Turn> rows;
  for (size_t t = 0; t < rewards.size(); ++t) rows.push_back({0, 0, int64_t(t), rewards[t], true});
  return to_vector(compute_returns(to_batch(rows, at::kDouble), o));
}
void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-9) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).margin(tol));
}
}  // namespace

TEST_CASE("reward-to-go with gamma = 1 and gamma = 0.9", "[returns]") {
  require_close(returns_of({0.0, 1.0, 1.5}, {}), {2.5, 2.5, 1.5});
  // Research §9: r = [0, 1, 1.5], gamma 0.9 -> [2.115, 2.35, 1.5].
  require_close(returns_of({0.0, 1.0, 1.5}, ReturnOptions().with_gamma(0.9)), {2.115, 2.35, 1.5});
}

TEST_CASE("outcome returns keep only the last turn's reward", "[returns]") {
  require_close(returns_of({0.2, 0.5, 0.4}, ReturnOptions().with_mode(ReturnMode::outcome)), {0.4, 0.4, 0.4});
  require_close(returns_of({0.2, 0.5, 0.4}, ReturnOptions().with_mode(ReturnMode::outcome).with_gamma(0.5)),
                {0.1, 0.2, 0.4});
}

TEST_CASE("residual shaping, with and without the unbiased correction", "[returns]") {
  // Research §1.4: shaped rewards [0.2, 0.3, -0.1] (plain) and [0.2, 0.3, -0.5] (unbiased, gamma 1).
  const auto plain = ReturnOptions().with_mode(ReturnMode::residual).with_unbiased_shaping(false);
  require_close(returns_of({0.2, 0.5, 0.4}, plain), {0.4, 0.2, -0.1});
  const auto unbiased = ReturnOptions().with_mode(ReturnMode::residual);
  require_close(returns_of({0.2, 0.5, 0.4}, unbiased), {0.0, -0.2, -0.5});
}

TEST_CASE("a masked turn's reward vanishes from earlier returns", "[returns]") {
  std::vector<Turn> rows = {{0, 0, 0, 0.0, true}, {0, 0, 1, 1.2, true}, {0, 0, 2, 5.0, false}};
  require_close(to_vector(compute_returns(to_batch(rows, at::kDouble))), {1.2, 1.2, 0.0});
}

TEST_CASE("returns match the scalar reference on ragged shuffled batches", "[returns][reference]") {
  for (uint64_t seed = 1; seed <= 10; ++seed)
    for (const auto mode : {ReturnMode::reward_to_go, ReturnMode::outcome, ReturnMode::residual})
      for (const double gamma : {1.0, 0.9, 0.0}) {
        const auto rows = random_rows(seed, 3, 5, 5, 0.3);
        const auto o = ReturnOptions().with_mode(mode).with_gamma(gamma).with_unbiased_shaping(seed % 2 == 0);
        const auto ref_mode = mode == ReturnMode::reward_to_go ? reference::Returns::reward_to_go
                              : mode == ReturnMode::outcome    ? reference::Returns::outcome
                                                               : reference::Returns::residual;
        INFO("mode " << to_string(mode) << " gamma " << gamma << " seed " << seed);
        require_close(to_vector(compute_returns(to_batch(rows, at::kDouble), o)),
                      reference::returns(rows, ref_mode, gamma, o.unbiased_shaping));
      }
}

TEST_CASE("bad return options are rejected naming the field", "[returns][edge]") {
  const TurnBatch b = to_batch({{0, 0, 0, 1.0, true}});
  REQUIRE_THROWS_WITH(compute_returns(b, ReturnOptions().with_gamma(1.5)), Catch::Contains("returns.gamma"));
  REQUIRE_THROWS_WITH(parse_return_mode("max"), Catch::Contains("allowed: reward_to_go, outcome, residual"));
  REQUIRE(parse_return_mode("outcome") == ReturnMode::outcome);
}
