// summarize_rollouts on a hand-made batch of verdicts: pass@k, fast@p of the best turn and of the
// last turn, the best-over-the-first-t-turns curve, turns to success and the hacked-turn share,
// per level and overall, each against values worked out by hand below.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include <torch/types.h>

#include "turnrl/kernels/evaluation.h"
#include "turnrl/kernels/kernel_env.h"

using namespace turnrl;

namespace {

EvalResult correct(double speedup) {
  EvalResult r;
  r.stage = EvalStage::ran;
  r.correct = true;
  r.speedup = speedup;
  return r;
}
EvalResult failed(EvalError error) {
  EvalResult r;
  r.stage = EvalStage::ran;
  r.error = error;
  return r;
}
EvalResult hacked(double speedup) {
  EvalResult r = correct(speedup);
  r.hacking_flags = kHackTampering;
  return r;
}

}  // namespace

TEST_CASE("evaluation statistics: best and last turn, the turn-budget curve, turns to success, hacked turns", "[trainer][eval]") {
  // Task 0 (level 1): episode 0 = [mismatch, 1.5x]; episode 1 = [1.1x, 0.9x].
  // Task 1 (level 2): episode 2 = [hacked 3x, 2.0x, mismatch]; episode 3 = [compile error].
  const std::vector<std::vector<EvalResult>> episodes = {
      {failed(EvalError::mismatch), correct(1.5)},
      {correct(1.1), correct(0.9)},
      {hacked(3.0), correct(2.0), failed(EvalError::mismatch)},
      {failed(EvalError::compile)}};
  RolloutBatch r;
  r.task_ids = {"a", "b"};
  r.task_levels = {1, 2};
  r.episodes = 4;
  std::vector<int64_t> group, traj, turn;
  for (int64_t e = 0; e < 4; ++e)
    for (size_t t = 0; t < episodes[size_t(e)].size(); ++t) {
      group.push_back(e / 2), traj.push_back(e), turn.push_back(int64_t(t));
      r.payloads.push_back(std::make_shared<KernelVerdict>(episodes[size_t(e)][t], KernelReward{}));
    }
  const int64_t rows = int64_t(group.size());
  r.batch = make_turn_batch(torch::tensor(group), torch::tensor(traj), torch::tensor(turn), torch::zeros({rows}),
                            torch::ones({rows}, torch::kBool));
  const EvalReport report = summarize_rollouts(r, {1, 2}, {1.0, 1.2});
  REQUIRE(report.levels.size() == 3);
  const LevelReport &one = report.levels[0], &two = report.levels[1], &all = report.levels[2];
  CHECK(all.level == 0);
  CHECK(all.episodes == 4);
  CHECK(report.turns == 8);
  // Best correct speedups 1.5, 1.1, 2.0, 0 (the hacked 3x does not count).
  CHECK(all.fast_at_p.at(1.0) == Approx(0.75));
  CHECK(all.fast_at_p.at(1.2) == Approx(0.5));
  // Last turns 1.5, 0.9, mismatch, compile error.
  CHECK(all.fast_at_p_last.at(1.0) == Approx(0.25));
  CHECK(all.fast_at_p_last.at(1.2) == Approx(0.25));
  // Within 1 turn: 0, 1.1, 0, 0; within 2: 1.5, 1.1, 2.0, 0; within 3: the same.
  CHECK(all.fast_at_p_by_turns.at(1.0) == std::vector<double>{0.25, 0.75, 0.75});
  CHECK(all.fast_at_p_by_turns.at(1.2) == std::vector<double>{0.0, 0.5, 0.5});
  CHECK(all.fast_at_p_by_turns.at(1.2).back() == all.fast_at_p.at(1.2));
  // First correct turns 2, 1, 2 (episode 3 never).
  CHECK(all.mean_turns_to_success == Approx(5.0 / 3.0));
  CHECK(all.hacked_turn_share == Approx(1.0 / 8.0));
  // Both episodes of task 0 solved; one of task 1's.
  CHECK(all.pass_at_k.at(1) == Approx((1.0 + 0.5) / 2));
  CHECK(all.pass_at_k.at(2) == Approx(1.0));

  CHECK(one.level == 1);
  CHECK(one.fast_at_p_by_turns.at(1.2) == std::vector<double>{0.0, 0.5});
  CHECK(one.fast_at_p_last.at(1.0) == Approx(0.5));
  CHECK(one.mean_turns_to_success == Approx(1.5));
  CHECK(one.hacked_turn_share == 0);
  CHECK(two.level == 2);
  CHECK(two.fast_at_p_by_turns.at(1.2) == std::vector<double>{0.0, 0.5, 0.5});
  CHECK(two.mean_turns_to_success == Approx(2.0));
  CHECK(two.hacked_turn_share == Approx(0.25));

  const Metrics m = report.to_metrics();
  CHECK(m.at("eval/fast@1.2_last_turn/all") == Approx(0.25));
  CHECK(m.at("eval/fast@1.2_within_1_turns/all") == 0);
  CHECK(m.at("eval/fast@1.2_within_2_turns/level1") == Approx(0.5));
  CHECK(m.at("eval/turns_to_success/level2") == Approx(2.0));
  CHECK(m.at("eval/hacked_turn_share/all") == Approx(0.125));
  const std::string text = report.to_text();
  CHECK(text.find("last@1.2") != std::string::npos);
  CHECK(text.find("fast@1.2 best over the first t turns: 0 0.5 0.5") != std::string::npos);
}
