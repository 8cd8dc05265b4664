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

// Task 0 (level 1): episode 0 = [mismatch, 1.5x]; episode 1 = [1.1x, 0.9x].
// Task 1 (level 2): episode 2 = [hacked 3x, 2.0x, mismatch]; episode 3 = [compile error].
RolloutBatch two_task_rollouts() {
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
      r.observations.emplace_back(), r.actions.emplace_back(), r.truncated.push_back(0);
    }
  const int64_t rows = int64_t(group.size());
  r.batch = make_turn_batch(torch::tensor(group), torch::tensor(traj), torch::tensor(turn), torch::zeros({rows}),
                            torch::ones({rows}, torch::kBool));
  return r;
}

// The k and p lists of the first test's summarize_rollouts call, as options.
EvalConfig pass_1_2_fast_1_12() {
  EvalConfig options;
  options.pass_k = {1, 2};
  options.fast_p = {1.0, 1.2};
  return options;
}

}  // namespace

TEST_CASE("evaluation statistics: best and last turn, the turn-budget curve, turns to success, hacked turns", "[trainer][eval]") {
  const RolloutBatch r = two_task_rollouts();
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

TEST_CASE("evaluation statistics of one split: only its tasks' episodes and levels, metrics under their own prefix",
          "[trainer][eval]") {
  const RolloutBatch r = two_task_rollouts();
  const EvalConfig options = pass_1_2_fast_1_12();
  TaskSet held_out;
  held_out.tasks.push_back(Task{"b"});
  const EvalReport part = summarize_task_episodes(r, held_out, options);
  // Task b alone: level 2 and the overall row, no empty level-1 row.
  REQUIRE(part.levels.size() == 2);
  CHECK(part.levels[0].level == 2);
  const LevelReport& all = part.levels[1];
  CHECK(all.tasks == 1);
  CHECK(all.episodes == 2);
  CHECK(part.turns == 4);
  CHECK(all.pass_at_k.at(1) == Approx(0.5));
  CHECK(all.fast_at_p.at(1.2) == Approx(0.5));  // best correct speedups 2.0 and 0
  CHECK(all.hacked_turn_share == Approx(0.25));
  const Metrics m = part.to_metrics("eval/held_out");
  CHECK(m.at("eval/held_out/pass@1/all") == Approx(0.5));
  CHECK(m.at("eval/held_out/fast@1.2/level2") == Approx(0.5));
  CHECK(m.at("eval/held_out/hacking/tampering") == 1);
  CHECK(m.at("eval/held_out/turns") == 4);
  CHECK(m.count("eval/held_out/pass@1/level1") == 0);
  // Both tasks: the whole batch's report.
  TaskSet both = held_out;
  both.tasks.insert(both.tasks.begin(), Task{"a"});
  CHECK(summarize_task_episodes(r, both, options).to_metrics() == summarize_rollouts(r, {1, 2}, {1.0, 1.2}).to_metrics());
  // A task the rollouts never sampled is an error, not a silent zero.
  TaskSet missing;
  missing.tasks.push_back(Task{"c"});
  CHECK_THROWS_WITH(summarize_task_episodes(r, missing, options), Catch::Contains("task 'c' has no episode"));
}

TEST_CASE("evaluation statistics a task: each task's own row, its level, its metrics, and a row a task in the table",
          "[trainer][eval]") {
  const RolloutBatch r = two_task_rollouts();
  const EvalConfig options = pass_1_2_fast_1_12();
  TaskSet tasks;
  Task a{"a"}, b{"b"};
  a.level = 1, b.level = 2;
  tasks.tasks = {b, a};  // the table follows the set's order
  const std::vector<TaskReport> rows = summarize_each_task(r, tasks, options);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].task == "b");
  CHECK(rows[0].stats.level == 2);
  // Task b: episodes [hacked 3x, 2.0x, mismatch] and [compile error].
  CHECK(rows[0].stats.episodes == 2);
  CHECK(rows[0].stats.pass_at_k.at(1) == Approx(0.5));
  CHECK(rows[0].stats.fast_at_p.at(1.2) == Approx(0.5));
  CHECK(rows[0].stats.mean_turns_to_success == Approx(2.0));
  CHECK(rows[0].stats.hacked_turn_share == Approx(0.25));
  // Task a: best speedups 1.5 and 1.1, last turns 1.5 and 0.9, both solved.
  CHECK(rows[1].task == "a");
  CHECK(rows[1].stats.level == 1);
  CHECK(rows[1].stats.pass_at_k.at(1) == Approx(1.0));
  CHECK(rows[1].stats.pass_at_k.at(2) == Approx(1.0));
  CHECK(rows[1].stats.fast_at_p.at(1.2) == Approx(0.5));
  CHECK(rows[1].stats.fast_at_p_last.at(1.0) == Approx(0.5));
  CHECK(rows[1].stats.mean_turns_to_success == Approx(1.5));
  const Metrics m = task_metrics(rows);
  CHECK(m.at("eval/task/a/fast@1.2") == Approx(0.5));
  CHECK(m.at("eval/task/b/pass@1") == Approx(0.5));
  CHECK(m.at("eval/task/b/fast@1.2_within_1_turns") == 0);
  CHECK(m.at("eval/task/a/turns_to_success") == Approx(1.5));
  const std::string table = task_table(rows);
  CHECK(table.find("task") == 0);
  CHECK(table.find("level") != std::string::npos);
  CHECK(table.find("\nb ") < table.find("\na "));
}
