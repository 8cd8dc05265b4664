// Kernel reward: every stage of the reward table against hand-made EvalResults (research
// drkernel-algorithms.md §5.2-5.3), the PR term against hand-computed shares, the option
// switches, and config validation.
#include <catch2/catch.hpp>

#include <cmath>

#include "algo/reward_test_support.h"
#include "turnrl/kernels/kernel_reward.h"

using namespace turnrl;
using turnrl::testing::require_error_naming;

namespace {

KernelRewardOptions from_yaml(const std::string& text) {
  return turnrl::testing::options_from_yaml<KernelRewardOptions>(text, "reward");
}

EvalResult correct_result(double speedup, double coverage) {
  EvalResult r;
  r.stage = EvalStage::profiled;
  r.correct = true;
  r.speedup = speedup;
  r.coverage = coverage;
  return r;
}

EvalResult failed(EvalStage stage, EvalError error) {
  EvalResult r;
  r.stage = stage;
  r.error = error;
  return r;
}

}  // namespace

TEST_CASE("speedup recipe: research §5.2 worked examples", "[reward][worked]") {
  const KernelRewardPolicy policy;  // defaults are the recipe's
  const KernelReward a = policy.score(correct_result(1.8, 0.62));
  REQUIRE(a.reward == Approx(1.71));
  REQUIRE(a.correctness == Approx(0.5));
  REQUIRE(a.speedup == Approx(0.9));
  REQUIRE(a.coverage == Approx(0.31));
  REQUIRE(a.outcome == RewardOutcome::correct);
  REQUIRE(a.reason.empty());
  REQUIRE(policy.score(correct_result(4.2, 0.9)).reward == Approx(2.45));  // speedup clipped at 3
  REQUIRE(policy.score(correct_result(0.7, 0.05)).reward == Approx(0.875));
}

TEST_CASE("speedup recipe: every failure scores the penalty 0, with its reason", "[reward]") {
  const KernelRewardPolicy policy;
  struct Case {
    EvalResult result;
    RewardOutcome outcome;
    std::string reason;
  };
  EvalResult wrong = failed(EvalStage::ran, EvalError::mismatch);
  wrong.speedup = 2.0;  // a stale speedup must not leak into the reward
  EvalResult decoy = correct_result(2.5, 0.0);
  decoy.hacking_flags = kHackNoCandidateWork;
  const std::vector<Case> cases = {
      {failed(EvalStage::none, EvalError::format), RewardOutcome::format, "format: format"},
      {failed(EvalStage::extracted, EvalError::compile), RewardOutcome::compile, "compile: compile"},
      {failed(EvalStage::compiled, EvalError::load), RewardOutcome::compile, "compile: load"},
      {failed(EvalStage::loaded, EvalError::runtime), RewardOutcome::runtime, "runtime: runtime"},
      {failed(EvalStage::loaded, EvalError::timeout), RewardOutcome::runtime, "runtime: timeout"},
      {failed(EvalStage::loaded, EvalError::crash), RewardOutcome::runtime, "runtime: crash"},
      {failed(EvalStage::loaded, EvalError::memory), RewardOutcome::runtime, "runtime: memory"},
      {wrong, RewardOutcome::incorrect, "incorrect: mismatch"},
      {failed(EvalStage::ran, EvalError::shape), RewardOutcome::incorrect, "incorrect: shape"},
      {failed(EvalStage::ran, EvalError::nonfinite), RewardOutcome::incorrect, "incorrect: nonfinite"},
      {decoy, RewardOutcome::hacking, "hacking: "},
  };
  for (const Case& c : cases) {
    const KernelReward k = policy.score(c.result);
    INFO(k.reason);
    REQUIRE(k.outcome == c.outcome);
    REQUIRE(k.reward == 0.0);
    REQUIRE(k.penalty == 0.0);
    REQUIRE(k.correctness == 0.0);
    REQUIRE(k.speedup == 0.0);
    REQUIRE(k.coverage == 0.0);
    REQUIRE(k.reason.rfind(c.reason, 0) == 0);
  }
}

TEST_CASE("hacking wins over correctness and keeps the flag names", "[reward]") {
  EvalResult r = correct_result(2.0, 0.8);
  r.hacking_flags = kHackLazy;
  r.hacking_reason = "92% of device time in cuBLAS";
  const KernelReward k = KernelRewardPolicy().score(r);
  REQUIRE(k.outcome == RewardOutcome::hacking);
  REQUIRE(k.reward == 0.0);
  REQUIRE(k.reason == "hacking: " + hacking_flag_names(kHackLazy));
  REQUIRE(k.reason.find("lazy") != std::string::npos);

  EvalResult flagged_by_error = failed(EvalStage::ran, EvalError::hacking);
  flagged_by_error.hacking_reason = "profiler entry point replaced";
  const KernelReward e = KernelRewardPolicy(KernelRewardOptions().with_penalty(RewardOutcome::hacking, -1)).score(flagged_by_error);
  REQUIRE(e.outcome == RewardOutcome::hacking);
  REQUIRE(e.reward == -1.0);
  REQUIRE(e.reason == "hacking: profiler entry point replaced");
}

TEST_CASE("per-stage penalties are configurable", "[reward]") {
  const KernelRewardPolicy policy(KernelRewardOptions()
                                      .with_penalty(RewardOutcome::format, -1)
                                      .with_penalty(RewardOutcome::compile, -0.75)
                                      .with_penalty(RewardOutcome::runtime, -0.5)
                                      .with_penalty(RewardOutcome::incorrect, -0.25)
                                      .with_penalty(RewardOutcome::hacking, -2));
  REQUIRE(policy.score(failed(EvalStage::none, EvalError::none)).reward == -1.0);  // nothing usable = format
  REQUIRE(policy.score(failed(EvalStage::extracted, EvalError::compile)).reward == -0.75);
  REQUIRE(policy.score(failed(EvalStage::loaded, EvalError::timeout)).reward == -0.5);
  REQUIRE(policy.score(failed(EvalStage::ran, EvalError::none)).reward == -0.25);  // ran, not accepted
  EvalResult hacked = correct_result(1.0, 1.0);
  hacked.hacking_flags = kHackCachesResults;
  const KernelReward h = policy.score(hacked);
  REQUIRE(h.reward == -2.0);
  REQUIRE(h.penalty == -2.0);
  REQUIRE(policy.score(correct_result(1.0, 0.0)).reward == Approx(1.0));  // correct: no penalty
}

TEST_CASE("speedup term: lower bound, log form and non-finite speedups", "[reward]") {
  const KernelRewardOptions no_pr = KernelRewardOptions().with_coverage(false);
  // The common default lower bound 1.0 zeroes speedups below 1.
  const KernelRewardPolicy lower(KernelRewardOptions(no_pr).with_speedup_lower_bound(1.0));
  REQUIRE(lower.score(correct_result(0.9, 0)).reward == Approx(0.5));
  REQUIRE(lower.score(correct_result(1.2, 0)).reward == Approx(1.1));
  // Log form: 0.5·ln(clamp(s, 1/3, 3)).
  const KernelRewardPolicy log(KernelRewardOptions(no_pr).with_speedup_form(SpeedupForm::log));
  REQUIRE(log.score(correct_result(2.0, 0)).speedup == Approx(0.5 * std::log(2.0)));
  REQUIRE(log.score(correct_result(10.0, 0)).speedup == Approx(0.5 * std::log(3.0)));
  REQUIRE(log.score(correct_result(0.5, 0)).speedup == Approx(0.5 * std::log(0.5)));
  REQUIRE(log.score(correct_result(0.01, 0)).speedup == Approx(0.5 * std::log(1.0 / 3.0)));
  REQUIRE(log.score(correct_result(1.0, 0)).speedup == Approx(0.0).margin(1e-12));
  // A correct turn without a valid timing gets only the correctness term (the reference's None -> 0).
  const KernelRewardPolicy recipe(no_pr);
  REQUIRE(recipe.score(correct_result(std::nan(""), 0)).reward == Approx(0.5));
  REQUIRE(recipe.score(correct_result(0.0, 0)).reward == Approx(0.5));
  REQUIRE(log.score(correct_result(0.0, 0)).reward == Approx(0.5));
}

TEST_CASE("PR term: hand-computed shares, sources, weight and threshold", "[reward][pr]") {
  // Device time: candidate kernels 30 + 12 us, library kernels 18 us -> true share 42/60 = 0.7.
  EvalResult r = correct_result(1.0, 42.0 / 60.0);
  r.profile = {{"my_softmax", 30, 10, true}, {"my_reduce", 12, 10, true}, {"cublas_gemm", 18, 10, false}};
  // KernelGYM's definition adds host time of every event to the denominator: 42 / (60 + 440).
  r.reference_coverage = 42.0 / 500.0;
  r.kernel_count_coverage = 20.0 / 30.0;
  const KernelRewardOptions base;
  REQUIRE(KernelRewardPolicy(base).score(r).coverage == Approx(0.5 * 0.7));
  REQUIRE(KernelRewardPolicy(base).score(r).reward == Approx(0.5 + 0.5 + 0.35));
  REQUIRE(KernelRewardPolicy(KernelRewardOptions(base).with_coverage_source(CoverageSource::reference)).score(r).coverage ==
          Approx(0.5 * 0.084));
  REQUIRE(KernelRewardPolicy(KernelRewardOptions(base).with_coverage_source(CoverageSource::kernel_count)).score(r).coverage ==
          Approx(0.5 * 2.0 / 3.0));
  REQUIRE(KernelRewardPolicy(KernelRewardOptions(base).with_coverage_weight(0.25)).score(r).coverage == Approx(0.175));
  REQUIRE(KernelRewardPolicy(KernelRewardOptions(base).with_coverage_threshold(0.75)).score(r).coverage == 0.0);
  REQUIRE(KernelRewardPolicy(KernelRewardOptions(base).with_coverage_threshold(0.7)).score(r).coverage == Approx(0.35));
  REQUIRE(KernelRewardPolicy(KernelRewardOptions(base).with_coverage(false)).score(r).coverage == 0.0);
  // Out-of-range or non-finite coverage is clamped / zeroed.
  REQUIRE(coverage_of(correct_result(1, 1.5), CoverageSource::true_share) == 1.0);
  REQUIRE(coverage_of(correct_result(1, std::nan("")), CoverageSource::true_share) == 0.0);
  // PR applies only to correct turns.
  EvalResult wrong = failed(EvalStage::ran, EvalError::mismatch);
  wrong.coverage = 0.9;
  REQUIRE(KernelRewardPolicy(base).score(wrong).coverage == 0.0);
}

TEST_CASE("weighted: correctness plus a speedup bonus above 1 + eps", "[reward]") {
  const KernelRewardPolicy policy(KernelRewardOptions().with_function(RewardFunction::weighted).with_coverage(false));
  REQUIRE(policy.score(correct_result(1.005, 0)).reward == Approx(0.5));
  REQUIRE(policy.score(correct_result(1.01, 0)).reward == Approx(1.0));
  REQUIRE(policy.score(correct_result(5.0, 0)).reward == Approx(1.0));
  REQUIRE(policy.score(failed(EvalStage::ran, EvalError::mismatch)).reward == 0.0);
  const KernelRewardPolicy with_pr(KernelRewardOptions().with_function(RewardFunction::weighted));
  REQUIRE(with_pr.score(correct_result(2.0, 0.4)).reward == Approx(1.2));
}

TEST_CASE("like_kernel: the stepped table and its penalties", "[reward]") {
  const KernelRewardPolicy policy(KernelRewardOptions().with_function(RewardFunction::like_kernel).with_coverage(false));
  const std::vector<std::pair<double, double>> tiers = {{3.5, 1.0}, {3.0, 1.0}, {2.5, 0.8}, {2.0, 0.8}, {1.7, 0.6},
                                                        {1.5, 0.6}, {1.3, 0.4}, {1.2, 0.4}, {1.1, 0.2}, {1.0, 0.2},
                                                        {0.99, -0.1}, {0.2, -0.1}};
  for (const auto& [s, want] : tiers) {
    INFO("speedup " << s);
    REQUIRE(policy.score(correct_result(s, 0)).reward == Approx(want));
  }
  REQUIRE(policy.score(failed(EvalStage::none, EvalError::format)).reward == -1.0);
  REQUIRE(policy.score(failed(EvalStage::extracted, EvalError::compile)).reward == -0.5);
  REQUIRE(policy.score(failed(EvalStage::loaded, EvalError::crash)).reward == -1.0);
  REQUIRE(policy.score(failed(EvalStage::ran, EvalError::mismatch)).reward == -0.3);
  EvalResult decoy = correct_result(4.0, 0.0);
  decoy.hacking_flags = kHackNoCandidateWork;
  REQUIRE(policy.score(decoy).reward == -1.0);
  // An explicit penalty overrides the table's, whatever order the setters ran in.
  const KernelRewardOptions o = KernelRewardOptions().with_penalty(RewardOutcome::compile, -0.2).with_function(RewardFunction::like_kernel);
  REQUIRE(KernelRewardPolicy(o).score(failed(EvalStage::extracted, EvalError::compile)).reward == -0.2);
}

TEST_CASE("one reward per turn of a multi-turn episode", "[reward]") {
  const std::vector<EvalResult> episode = {failed(EvalStage::extracted, EvalError::compile), correct_result(1.2, 0.5),
                                           correct_result(2.0, 0.9)};
  const std::vector<double> r = KernelRewardPolicy().rewards(episode);
  REQUIRE(r.size() == 3);
  REQUIRE(r[0] == 0.0);
  REQUIRE(r[1] == Approx(0.5 + 0.6 + 0.25));
  REQUIRE(r[2] == Approx(0.5 + 1.0 + 0.45));
  REQUIRE(KernelRewardPolicy().score(episode).size() == 3);
}

TEST_CASE("reward options from YAML", "[reward][config]") {
  const KernelRewardOptions o = from_yaml(R"(
function: like_kernel
speedup_form: log
speedup_upper_bound: 4
coverage: {enabled: false, weight: 0.3, threshold: 0.2, source: reference}
penalties: {compile: -0.7}
tiers: {min_speedup: [2, 1], reward: [1, 0.5], below: -0.2}
)");
  REQUIRE(o.function == RewardFunction::like_kernel);
  REQUIRE(o.speedup_form == SpeedupForm::log);
  REQUIRE(o.speedup_upper_bound == 4.0);
  REQUIRE(!o.coverage_enabled);
  REQUIRE(o.coverage_weight == 0.3);
  REQUIRE(o.coverage_threshold == 0.2);
  REQUIRE(o.coverage_source == CoverageSource::reference);
  REQUIRE(o.penalty(RewardOutcome::compile) == -0.7);
  REQUIRE(o.penalty(RewardOutcome::incorrect) == -0.3);  // like_kernel's table
  REQUIRE(o.tiers.size() == 2);
  REQUIRE(o.below_tiers_reward == -0.2);
  const KernelRewardPolicy policy(o);
  REQUIRE(policy.score(correct_result(1.5, 0)).reward == 0.5);
  REQUIRE(policy.score(correct_result(0.5, 0)).reward == -0.2);
}

TEST_CASE("invalid reward configs fail naming the field", "[reward][config]") {
  require_error_naming([] { from_yaml("coverage: {threshold: 1.5}"); }, "reward.coverage.threshold");
  require_error_naming([] { from_yaml("coverage: {weight: -0.5}"); }, "reward.coverage.weight");
  require_error_naming([] { from_yaml("correct_weight: -1"); }, "reward.correct_weight");
  require_error_naming([] { from_yaml("function: speed"); }, "reward.function");
  require_error_naming([] { from_yaml("coverage: {source: cpu_time}"); }, "reward.coverage.source");
  require_error_naming([] { from_yaml("coverage: {wieght: 0.5}"); }, "reward.coverage.wieght");
  require_error_naming([] { from_yaml("penalties: {crash: -1}"); }, "reward.penalties.crash");
  require_error_naming([] { from_yaml("speedup_weigth: 1"); }, "reward.speedup_weigth");
  require_error_naming([] { from_yaml("tiers: {min_speedup: [1, 2], reward: [0.1, 0.2]}"); }, "reward.tiers.min_speedup[1]");
  require_error_naming([] { from_yaml("tiers: {min_speedup: [2, 1], reward: [0.1]}"); }, "reward.tiers.reward");
  require_error_naming([] { from_yaml("speedup_upper_bound: 2\nspeedup_lower_bound: 2.5"); }, "reward.speedup_lower_bound");
  require_error_naming([] { KernelRewardPolicy(KernelRewardOptions().with_coverage_threshold(-0.1)); },
                       "reward.coverage.threshold");
  require_error_naming([] { KernelRewardPolicy(KernelRewardOptions().with_penalty(RewardOutcome::runtime, std::nan(""))); },
                       "reward.penalties.runtime");
}
