// Rejection steps and group filters: the meaningful-turn mask on research §1.3 / §9 example 2,
// PRS keep probabilities (§9 example 7) and empirical drop rates, truncation handling, the group
// filters of §7.1 step 8 with the carry-over buffer, DAPO dynamic sampling, and config checks.
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "support/batches.h"
#include "algo/reward_test_support.h"
#include "turnrl/algo/rejection.h"

using namespace turnrl;
using turnrl::testing::require_error_naming;

using turnrl::reference::Turn;
using turnrl::testing::to_batch;
using turnrl::testing::to_tensor;
using turnrl::testing::to_vector;

namespace {

RejectionOptions from_yaml(const std::string& text) {
  return turnrl::testing::options_from_yaml<RejectionOptions>(text, "rejection");
}

void add_trajectory(std::vector<Turn>& rows, int64_t group, int64_t traj, std::vector<double> rewards) {
  for (size_t t = 0; t < rewards.size(); ++t) rows.push_back({group, traj, int64_t(t), rewards[t], true});
}

// A batch with an all-true [N, 4] response_mask.
TurnBatch with_tokens(TurnBatch b, int64_t length = 4) {
  b.response_mask = at::ones({b.size(), length}, at::kBool);
  return b;
}

std::vector<bool> to_bools(const torch::Tensor& t) {
  std::vector<bool> out;
  for (double v : to_vector(t)) out.push_back(v != 0);
  return out;
}

// Groups of `n` one-turn trajectories with the given rewards, one vector per group.
TurnBatch one_turn_groups(const std::vector<std::vector<double>>& groups) {
  std::vector<Turn> rows;
  int64_t traj = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (double r : groups[g]) add_trajectory(rows, int64_t(g), traj++, {r});
  return to_batch(rows);
}

PrsInputs inputs(const std::vector<double>& coverage, const std::vector<bool>& correct,
                 const std::vector<double>& speedup = {}) {
  std::vector<int64_t> c(correct.begin(), correct.end());
  return {to_tensor(coverage, at::kDouble), at::tensor(c, at::kLong).to(at::kBool),
          to_tensor(speedup.empty() ? std::vector<double>(coverage.size(), 1.0) : speedup, at::kDouble)};
}

void require_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("row " << i);
    REQUIRE(got[i] == Approx(want[i]).margin(1e-6));
  }
}

}  // namespace

// --- meaningful-turn mask -------------------------------------------------------------------

TEST_CASE("meaningful-turn mask: research §9 example 2", "[rejection][worked]") {
  std::vector<Turn> rows;
  add_trajectory(rows, 0, 0, {1.0, 1.5, 2.0});
  add_trajectory(rows, 0, 1, {0.8, 1.0});
  add_trajectory(rows, 0, 2, {0.0, 1.2, 0.0});  // turn 3 regresses after a success: masked
  add_trajectory(rows, 0, 3, {0.0});
  TurnBatch b = to_batch(rows);
  const TurnMaskReport report = apply_meaningful_turn_mask(b);
  REQUIRE(report.masked == 1);
  REQUIRE(to_bools(b.turn_mask) == std::vector<bool>{true, true, true, true, true, true, true, false, true});
  REQUIRE(to_bools(report.masked_rows) == std::vector<bool>{false, false, false, false, false, false, false, true, false});
  require_close(to_vector(b.reward), {1.0, 1.5, 2.0, 0.8, 1.0, 0.0, 1.2, 0.0, 0.0});
}

TEST_CASE("meaningful-turn mask: research §1.3 rule on shuffled rows", "[rejection]") {
  // Leading non-positive turns stay; after the first positive turn every non-positive one goes,
  // later positives stay. NaN counts as non-positive. Rows are deliberately out of order.
  std::vector<Turn> rows = {{0, 0, 3, 0.5, true}, {0, 0, 0, -0.3, true}, {0, 0, 2, 0.0, true},
                            {0, 0, 1, 0.7, true}, {1, 1, 1, 0.0, true}, {1, 1, 0, 1.0, true},
                            {1, 2, 0, 0.0, true}, {1, 2, 1, 0.0, true}};
  TurnBatch b = to_batch(rows);
  b.reward.index_put_({4}, std::nan(""));  // after to_batch, which rejects NaN rewards
  REQUIRE(to_bools(meaningful_turns(b)) == std::vector<bool>{true, true, false, true, false, true, true, true});
  // Turns already masked stay masked and are not counted again.
  b.turn_mask.index_put_({2}, false);
  const TurnMaskReport report = apply_meaningful_turn_mask(b);
  REQUIRE(report.masked == 1);  // only the NaN turn is new
  REQUIRE(to_vector(b.reward)[4] == 0.0);
}

// --- PRS ------------------------------------------------------------------------------------

TEST_CASE("PRS keep probabilities: research §9 example 7", "[rejection][prs][worked]") {
  TurnBatch b = one_turn_groups({{1, 1, 1, 1}});
  const torch::Tensor p = prs_keep_probability(b, inputs({0.25, 0.35, 0.45, 0.10}, {true, true, true, false}), {});
  const std::vector<double> got = to_vector(p);
  REQUIRE(got[0] == 0.0);
  REQUIRE(got[1] == Approx(0.5).margin(1e-6));
  REQUIRE(got[2] == 1.0);
  REQUIRE(got[3] == 1.0);
}

TEST_CASE("PRS keep probabilities: rounding, step, OR rule and geometric level", "[rejection][prs]") {
  TurnBatch b = one_turn_groups({{1, 1, 1}});
  // Rounded to 2 decimals first: 0.304 -> 0.30 -> 0; unrounded 0.304 -> 0.04.
  REQUIRE(to_vector(prs_keep_probability(b, inputs({0.304, 0.3449, 1}, {true, true, true}), {}))[0] == 0.0);
  REQUIRE(to_vector(prs_keep_probability(b, inputs({0.304, 0.3449, 1}, {true, true, true}), PrsOptions().with_round_coverage(false)))[0] ==
          Approx(0.04));
  REQUIRE(to_vector(prs_keep_probability(b, inputs({0.304, 0.3449, 1}, {true, true, true}), {}))[1] == Approx(0.4));
  // factor 0: a step at the threshold.
  REQUIRE(to_vector(prs_keep_probability(b, inputs({0.29, 0.3, 0.9}, {true, true, true}), PrsOptions().with_factor(0))) ==
          std::vector<double>{0, 1, 1});
  // OR rule: a fast kernel is kept whatever its coverage; a negative threshold is off.
  const PrsInputs fast = inputs({0.1, 0.1, 0.1}, {true, true, true}, {2.5, 1.9, 2.0});
  REQUIRE(to_vector(prs_keep_probability(b, fast, PrsOptions().with_speedup_threshold(2.0))) == std::vector<double>{1, 0, 1});
  REQUIRE(to_vector(prs_keep_probability(b, fast, {})) == std::vector<double>{0, 0, 0});

  // Geometric: one trajectory of three turns with coverages 0.2, 0.3, 0.6 -> (0.036)^(1/3) = 0.3302
  // for every turn (the incorrect turn's coverage included, as in the reference) -> p = 0.302 for
  // the correct turns; the incorrect turn stays 1.
  std::vector<Turn> rows;
  add_trajectory(rows, 0, 0, {1, 1, 1});
  add_trajectory(rows, 0, 1, {1, 1});
  TurnBatch g = with_tokens(to_batch(rows));
  g.response_mask[4].fill_(false);  // a turn already rejected does not enter the mean
  const PrsInputs in = inputs({0.2, 0.3, 0.6, 0.36, 0.01}, {true, false, true, true, true});
  const std::vector<double> p = to_vector(prs_keep_probability(g, in, PrsOptions().with_level(PrsLevel::geometric)));
  const double geo = std::cbrt(0.2 * 0.3 * 0.6);
  REQUIRE(p[0] == Approx((geo - 0.3) / 0.1));
  REQUIRE(p[1] == 1.0);
  REQUIRE(p[2] == Approx((geo - 0.3) / 0.1));
  REQUIRE(p[3] == Approx(0.6));  // trajectory 1's mean is its one live turn, 0.36
  REQUIRE(p[4] == Approx(0.6));
}

TEST_CASE("PRS masks dropped turns, keeps them in the batch, and is reproducible", "[rejection][prs]") {
  const TurnBatch base = with_tokens(one_turn_groups({{1, 1, 1, 1, 1, 1}}));
  const PrsInputs in = inputs({0.25, 0.25, 0.45, 0.45, 0.10, 0.35}, {true, true, true, true, false, true});
  TurnBatch a = base, b = base;
  a.response_mask = base.response_mask.clone(), b.response_mask = base.response_mask.clone();
  const PrsReport ra = apply_prs(a, in, {}, uint64_t(7));
  const PrsReport rb = apply_prs(b, in, {}, uint64_t(7));
  REQUIRE(a.size() == 6);  // masked, not deleted
  REQUIRE(at::equal(a.response_mask, b.response_mask));
  REQUIRE(ra.dropped == rb.dropped);
  REQUIRE(ra.subject == 5);
  REQUIRE(ra.expected_dropped == Approx(2.5).margin(1e-6));
  const std::vector<bool> dropped = to_bools(ra.dropped_rows);
  REQUIRE(dropped[0]);
  REQUIRE(dropped[1]);
  REQUIRE(!dropped[2]);
  REQUIRE(!dropped[3]);
  REQUIRE(!dropped[4]);
  REQUIRE(ra.dropped == 2 + int64_t(dropped[5]));
  // Rows are cleared exactly where dropped.
  REQUIRE(to_bools(a.response_mask.any(1)) == to_bools(~ra.dropped_rows));
  REQUIRE(at::equal(a.reward, base.reward));
  // A row already rejected is not counted again.
  TurnBatch c = a;
  c.response_mask = a.response_mask.clone();
  const PrsReport rc = apply_prs(c, in, {}, uint64_t(8));
  REQUIRE(rc.subject == 5 - ra.dropped);
  // Disabled: nothing changes.
  TurnBatch d = base;
  d.response_mask = base.response_mask.clone();
  REQUIRE(apply_prs(d, in, PrsOptions().with_enabled(false), uint64_t(7)).dropped == 0);
  REQUIRE(at::equal(d.response_mask, base.response_mask));
  // No response_mask: an error naming it.
  TurnBatch e = one_turn_groups({{1}});
  require_error_naming([&] { apply_prs(e, inputs({0.1}, {true}), {}, uint64_t(1)); }, "TurnBatch.response_mask");
}

TEST_CASE("PRS drop rates match the configured probability (binomial bound)", "[rejection][prs][statistics]") {
  // 20000 correct turns per coverage level; with p_keep = q the kept count is Binomial(n, q).
  // 5 standard deviations: a false failure has probability < 1e-6 (and the seed is fixed).
  const int64_t n = 20000;
  const std::vector<std::pair<double, double>> levels = {{0.32, 0.2}, {0.35, 0.5}, {0.38, 0.8}, {0.30, 0.0}, {0.40, 1.0}};
  at::Generator generator = at::detail::createCPUGenerator(1234);
  for (const auto& [coverage, q] : levels) {
    std::vector<Turn> rows;
    for (int64_t i = 0; i < n; ++i) rows.push_back({0, i, 0, 1.0, true});
    TurnBatch b = with_tokens(to_batch(rows), 1);
    const PrsReport r = apply_prs(b, inputs(std::vector<double>(n, coverage), std::vector<bool>(n, true)), {}, generator);
    const double kept = double(n - r.dropped);
    const double sd = std::sqrt(n * q * (1 - q));
    INFO("coverage " << coverage << ": kept " << kept << " of " << n << ", expected " << n * q);
    REQUIRE(std::abs(kept - n * q) <= 5 * sd + 1e-9);
    REQUIRE(r.expected_dropped == Approx(n * (1 - q)).margin(n * 1e-6));
  }
}

// --- truncation -----------------------------------------------------------------------------

TEST_CASE("truncation handling: keep, reject the turn, mask the trajectory", "[rejection]") {
  std::vector<Turn> rows;
  add_trajectory(rows, 0, 0, {0.5, 1.0});
  add_trajectory(rows, 0, 1, {0.2, 0.4});
  const TurnBatch base = with_tokens(to_batch(rows));
  const torch::Tensor truncated = at::tensor(std::vector<int64_t>{0, 1, 0, 0}, at::kLong).to(at::kBool);

  TurnBatch k = base;
  REQUIRE(handle_truncation(k, truncated, TruncationHandling::keep).affected == 0);

  TurnBatch r = base;
  r.response_mask = base.response_mask.clone();
  const TruncationReport rr = handle_truncation(r, truncated, TruncationHandling::reject_turn);
  REQUIRE(rr.truncated == 1);
  REQUIRE(rr.affected == 1);
  REQUIRE(to_bools(r.response_mask.any(1)) == std::vector<bool>{true, false, true, true});
  REQUIRE(to_bools(r.turn_mask) == std::vector<bool>{true, true, true, true});

  TurnBatch m = base;
  const TruncationReport rm = handle_truncation(m, truncated, TruncationHandling::mask_trajectory);
  REQUIRE(rm.affected == 2);
  REQUIRE(to_bools(m.turn_mask) == std::vector<bool>{false, false, true, true});
  const std::vector<double> reward = to_vector(m.reward);
  REQUIRE(reward[0] == 0.0);
  REQUIRE(reward[1] == 0.0);
  REQUIRE(reward[2] == Approx(0.2));
  REQUIRE(reward[3] == Approx(0.4));
}

// --- group filters --------------------------------------------------------------------------

TEST_CASE("group filter: last-turn std below 1e-3 and too-small groups are dropped", "[rejection][groups]") {
  // Two-turn trajectories: group 0's last turns all 1.0 (earlier turns differ) -> dropped;
  // group 1 informative; group 2 has only 2 of 4 trajectories (min size 4/2 + 1 = 3) -> dropped;
  // group 3's last turns differ by 5e-4 only (std 2.9e-4) -> dropped.
  std::vector<Turn> rows;
  int64_t traj = 0;
  for (double first : {0.0, 0.5, 1.0, 1.5}) add_trajectory(rows, 0, traj++, {first, 1.0});
  for (double last : {0.0, 1.0, 1.5, 2.0}) add_trajectory(rows, 1, traj++, {0.5, last});
  for (double last : {0.0, 2.0}) add_trajectory(rows, 2, traj++, {0.5, last});
  for (double last : {1.0, 1.0005, 1.0, 1.0005}) add_trajectory(rows, 3, traj++, {0.0, last});
  const TurnBatch b = to_batch(rows);
  const GroupFilterReport r = filter_groups(b, {}, at::detail::createCPUGenerator(1));
  REQUIRE(r.kept == std::vector<int64_t>{1});
  REQUIRE(r.low_std == std::vector<int64_t>{0, 3});
  REQUIRE(r.too_small == std::vector<int64_t>{2});
  REQUIRE(r.all_equal.empty());
  REQUIRE(r.over_target.empty());
  REQUIRE(r.kept_trajectories == 4);
  REQUIRE(r.enough);
  REQUIRE(to_bools(r.keep_rows) == to_bools(b.group == 1));
  // An explicit min size lets group 2 through.
  REQUIRE(filter_groups(b, GroupFilterOptions().with_min_group_size(2), at::detail::createCPUGenerator(1)).kept ==
          std::vector<int64_t>{1, 2});
  // The std filter off: group 0 and 3 survive too.
  REQUIRE(filter_groups(b, GroupFilterOptions().with_min_last_turn_std(0), at::detail::createCPUGenerator(1)).kept ==
          std::vector<int64_t>{0, 1, 3});
}

TEST_CASE("group filter: the last turn's reward is the masked one", "[rejection][groups]") {
  // Both trajectories end on reward 1.0, but B's last turn is masked (reward counts as 0).
  std::vector<Turn> rows = {{0, 0, 0, 1.0, true}, {0, 0, 1, 1.0, true}, {0, 1, 0, 1.0, true}, {0, 1, 1, 1.0, false}};
  const TurnBatch b = to_batch(rows);
  REQUIRE(filter_groups(b, GroupFilterOptions().with_min_group_size(1), at::detail::createCPUGenerator(1)).kept ==
          std::vector<int64_t>{0});
}

TEST_CASE("group filter: all-equal groups", "[rejection][groups]") {
  std::vector<Turn> rows;
  add_trajectory(rows, 0, 0, {1.0, 0.0});  // research §9 example 3, prompt q: identical trajectories
  add_trajectory(rows, 0, 1, {1.0, 0.0});
  add_trajectory(rows, 0, 2, {1.0, 0.0});
  add_trajectory(rows, 1, 3, {0.0, 1.0});  // same last turns, different first turns: informative
  add_trajectory(rows, 1, 4, {0.5, 1.0});
  add_trajectory(rows, 2, 5, {1.0, 1.0});  // same rewards, different lengths: returns differ
  add_trajectory(rows, 2, 6, {1.0});
  const TurnBatch b = to_batch(rows);
  const GroupFilterOptions o = GroupFilterOptions().with_min_last_turn_std(0).with_drop_all_equal(true).with_min_group_size(1);
  const GroupFilterReport r = filter_groups(b, o, at::detail::createCPUGenerator(1));
  REQUIRE(r.all_equal == std::vector<int64_t>{0});
  REQUIRE(r.kept == std::vector<int64_t>{1, 2});
}

TEST_CASE("group filter: target groups, complete groups first, seeded", "[rejection][groups]") {
  // Six informative groups, two of them incomplete (3 of 4 trajectories); target 4.
  std::vector<std::vector<double>> groups = {{0, 1, 2, 3}, {0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3},
                                             {0, 1, 2},    {0, 1, 2, 3}};
  const TurnBatch b = one_turn_groups(groups);
  const GroupFilterOptions o = GroupFilterOptions().with_target_groups(3);
  const GroupFilterReport r = filter_groups(b, o, at::detail::createCPUGenerator(1));
  REQUIRE(r.kept.size() == 3);
  REQUIRE(r.over_target.size() == 3);
  for (int64_t g : r.kept) REQUIRE(g != 1);  // incomplete groups come last
  for (int64_t g : r.kept) REQUIRE(g != 4);
  REQUIRE(r.kept_trajectories == 12);
  REQUIRE(r.needed_trajectories == 12);
  REQUIRE(r.enough);
  const GroupFilterReport again = filter_groups(b, o, at::detail::createCPUGenerator(1));
  REQUIRE(again.kept == r.kept);
  // Target 5: all four complete groups plus one incomplete one -> 19 < 20 trajectories: not enough.
  const GroupFilterReport five = filter_groups(b, GroupFilterOptions().with_target_groups(5), at::detail::createCPUGenerator(1));
  REQUIRE(five.kept.size() == 5);
  REQUIRE(five.kept_trajectories == 19);
  REQUIRE(!five.enough);
}

TEST_CASE("carry-over buffer: too few survivors are stashed and the step skipped", "[rejection][groups]") {
  GroupCarryOver carry(GroupFilterOptions().with_target_groups(2));
  // Step 1: one informative group (1), one flat group (0).
  TurnBatch step1 = with_tokens(one_turn_groups({{1, 1, 1, 1}, {0, 1, 2, 0.5}}));
  GroupCarryOver::Selection s1 = carry.select(carry.merge(step1));
  REQUIRE(!s1.train);
  REQUIRE(s1.report.kept == std::vector<int64_t>{1});
  REQUIRE(s1.report.low_std == std::vector<int64_t>{0});
  REQUIRE(carry.stashed_groups() == 1);
  REQUIRE(carry.stashed_rows() == 4);
  // Step 2: one more informative group; merged with the stash -> two groups -> train.
  TurnBatch step2 = with_tokens(one_turn_groups({{2, 0, 1, 0}, {0, 0, 0, 0}}));
  TurnBatch merged = carry.merge(step2);
  REQUIRE(carry.stashed_rows() == 0);
  REQUIRE(merged.size() == 12);
  REQUIRE(to_vector(merged.reward).front() == 0.0);  // the stash comes first
  GroupCarryOver::Selection s2 = carry.select(merged);
  REQUIRE(s2.train);
  REQUIRE(s2.batch.size() == 8);
  REQUIRE(s2.report.kept.size() == 2);
  REQUIRE(s2.report.low_std.size() == 1);
  REQUIRE(carry.stashed_rows() == 0);
  REQUIRE(s2.batch.response_mask.size(0) == 8);
}

TEST_CASE("dynamic sampling collects informative groups over rounds", "[rejection][groups]") {
  // Round r yields one flat group and one informative group.
  int calls = 0;
  const auto sample = [&](int round) {
    ++calls;
    return one_turn_groups({{1, 1, 1}, {double(round), 0, 1}});
  };
  const DynamicSamplingResult r =
      dynamic_sampling(sample, GroupFilterOptions().with_target_groups(3).with_max_sampling_rounds(10));
  REQUIRE(calls == 3);
  REQUIRE(r.rounds == 3);
  REQUIRE(r.enough);
  REQUIRE(r.informative_groups == 3);
  REQUIRE(r.batch.size() == 9);
  REQUIRE(r.reports.size() == 3);
  REQUIRE(r.reports[0].low_std == std::vector<int64_t>{0});
  // Out of rounds: what was collected, flagged short.
  calls = 0;
  const DynamicSamplingResult short_of =
      dynamic_sampling(sample, GroupFilterOptions().with_target_groups(5).with_max_sampling_rounds(2));
  REQUIRE(calls == 2);
  REQUIRE(!short_of.enough);
  REQUIRE(short_of.informative_groups == 2);
  // More than the target in one round: truncated to the first ones.
  const auto rich = [](int) { return one_turn_groups({{0, 1}, {1, 2}, {2, 3}}); };
  const DynamicSamplingResult t = dynamic_sampling(rich, GroupFilterOptions().with_target_groups(2).with_min_group_size(1));
  REQUIRE(t.rounds == 1);
  REQUIRE(t.informative_groups == 3);
  REQUIRE(t.batch.size() == 4);
  REQUIRE(to_vector(t.batch.reward) == std::vector<double>{0, 1, 1, 2});
}

TEST_CASE("concat and select keep every tensor and shift ids", "[rejection][groups]") {
  TurnBatch a = with_tokens(one_turn_groups({{1, 2}}), 3);
  TurnBatch b = with_tokens(one_turn_groups({{3}, {4}}), 3);
  const TurnBatch c = concat_batches(a, b);
  REQUIRE(c.size() == 4);
  REQUIRE(to_vector(c.group) == std::vector<double>{0, 0, 1, 2});
  REQUIRE(to_vector(c.traj) == std::vector<double>{0, 1, 2, 3});
  REQUIRE(c.response_mask.size(0) == 4);
  const TurnBatch s = select_rows(c, c.group == 1);
  REQUIRE(s.size() == 1);
  REQUIRE(to_vector(s.reward) == std::vector<double>{3});
  TurnBatch narrow = with_tokens(one_turn_groups({{5}}), 2);
  require_error_naming([&] { concat_batches(a, narrow); }, "TurnBatch.response_mask");
  require_error_naming([&] { concat_batches(a, one_turn_groups({{5}})); }, "TurnBatch.response_mask");
}

// --- options --------------------------------------------------------------------------------

TEST_CASE("rejection options from YAML", "[rejection][config]") {
  const RejectionOptions o = from_yaml(R"(
mask_void_turns: false
truncation: mask_trajectory
prs: {enabled: true, level: geometric, threshold: 0.25, factor: 0, speedup_threshold: 1.5, round_coverage: false, coverage_source: reference}
group_filter: {min_last_turn_std: 0.01, drop_all_equal: true, min_group_size: 3, group_size: 8, target_groups: 16, max_sampling_rounds: 4, seed: 9}
)");
  REQUIRE(!o.mask_void_turns);
  REQUIRE(o.truncation == TruncationHandling::mask_trajectory);
  REQUIRE(o.prs.level == PrsLevel::geometric);
  REQUIRE(o.prs.threshold == 0.25);
  REQUIRE(o.prs.factor == 0.0);
  REQUIRE(o.prs.speedup_threshold == 1.5);
  REQUIRE(!o.prs.round_coverage);
  REQUIRE(o.prs.coverage_source == CoverageSource::reference);
  REQUIRE(o.groups.min_last_turn_std == 0.01);
  REQUIRE(o.groups.drop_all_equal);
  REQUIRE(o.groups.min_group_size == 3);
  REQUIRE(o.groups.group_size == 8);
  REQUIRE(o.groups.target_groups == 16);
  REQUIRE(o.groups.max_sampling_rounds == 4);
  REQUIRE(o.groups.seed == 9);
  const RejectionOptions defaults = from_yaml("{}");
  REQUIRE(defaults.mask_void_turns);
  REQUIRE(defaults.prs.threshold == 0.3);
  REQUIRE(defaults.prs.factor == 0.1);
  REQUIRE(defaults.groups.min_last_turn_std == 1e-3);
}

TEST_CASE("invalid rejection configs fail naming the field", "[rejection][config]") {
  require_error_naming([] { from_yaml("prs: {threshold: 1.2}"); }, "rejection.prs.threshold");
  require_error_naming([] { from_yaml("prs: {factor: -0.1}"); }, "rejection.prs.factor");
  require_error_naming([] { from_yaml("prs: {treshold: 0.3}"); }, "rejection.prs.treshold");
  require_error_naming([] { from_yaml("prs: {level: trajectory}"); }, "rejection.prs.level");
  require_error_naming([] { from_yaml("group_filter: {min_group_size: -1}"); }, "rejection.group_filter.min_group_size");
  require_error_naming([] { from_yaml("group_filter: {min_last_turn_std: -1e-3}"); }, "rejection.group_filter.min_last_turn_std");
  require_error_naming([] { from_yaml("truncation: drop"); }, "rejection.truncation");
  require_error_naming([] { from_yaml("mask_void_turn: true"); }, "rejection.mask_void_turn");
  require_error_naming([] { PrsOptions().with_threshold(-0.1).validate(); }, "rejection.prs.threshold");
  require_error_naming([] { GroupFilterOptions().with_max_sampling_rounds(0).validate(); },
                       "rejection.group_filter.max_sampling_rounds");
}
