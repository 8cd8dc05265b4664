// The Trainer end to end: a real step through the CPU evaluator, each stage on its own, loss
// decrease on a fixed batch, bit-for-bit resume, a killed run, and configs it refuses.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>

#include "turnrl/core/error.h"
#include "turnrl/kernels/backends.h"
#include "turnrl/kernels/evaluator_health.h"
#include "turnrl/rl/checkpoint.h"
#include "turnrl/kernels/evaluation.h"
#include "turnrl/kernels/kernel_recipe.h"
#include "turnrl/kernels/kernel_stages.h"
#include "kernels/trainer_test_support.h"

extern char** environ;

using namespace turnrl;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<KernelEvaluator> rules() { return std::make_shared<test::PlanRuleEvaluator>(); }

std::vector<torch::Tensor> parameters_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.policy().parameters()) out.push_back(p.detach().clone());
  return out;
}

bool identical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

std::vector<Metrics> metrics_of(const std::string& run_dir) { return read_metrics_jsonl(run_dir + "/metrics.jsonl"); }

}  // namespace

TEST_CASE("one full training step through the real CPU evaluator writes a complete run directory", "[trainer][cpu]") {
  TrainConfig c = test::tiny_config(test::fresh_dir("real-step"), 1);
  c.trainer.tasks_per_step = 1;
  c.trainer.samples_per_task = 2;
  c.env.max_turns = 1;
  c.env.timing_trials = 2;
  c.env.correctness_trials = 1;
  c.evaluator.workers = 1;
  c.evaluator.warmup = 0;
  c.tasks.include = {"relu_bias"};
  KernelTrainer trainer(c);
  trainer.train();
  CHECK(trainer.step() == 1);
  const auto rows = metrics_of(c.run.dir);
  REQUIRE(rows.size() == 1);
  const Metrics& m = rows[0];
  CHECK(m.at("step") == 1);
  CHECK(m.at("rollout/turns") == 2);
  CHECK(m.at("perf/evaluations") == 2);
  for (const char* key : {"reward/mean", "kernel/correct", "kernel/fast@1.2", "mismatch/mismatch_kl", "prs/drop_rate",
                          "time/step_s", "perf/evals_per_s"})
    CHECK(m.count(key) == 1);
  const KernelTrainer& t = trainer;
  // The evaluations were real: every turn reached at least compilation or a classified failure.
  for (const EvalResult& e : kernel_evals(t.last_rollouts())) CHECK(e.stage != EvalStage::none);
  CHECK(fs::exists(c.run.dir + "/config.yaml"));
  CHECK(load_config(c.run.dir + "/config.yaml").trainer.steps == 1);
  CHECK(read_metrics_jsonl(c.run.dir + "/samples.jsonl").size() == 2);
  REQUIRE(latest_checkpoint(c.run.dir + "/checkpoints"));
  CHECK(latest_checkpoint(c.run.dir + "/checkpoints")->step == 1);
}

TEST_CASE("the stages compose by hand into a step and the batch is shaped as documented", "[trainer][stages]") {
  KernelTrainer trainer(test::tiny_config(test::fresh_dir("stages")), rules());
  const auto tasks = trainer.step_tasks(0);
  REQUIRE(tasks.size() == 2);
  CHECK(tasks[0].id != tasks[1].id);
  RolloutBatch r = trainer.collect_rollouts(tasks, 4, rollout_sampling(trainer.config()), 99);
  const TurnBatch& b = r.batch;
  CHECK(r.episodes == 8);
  CHECK(b.size() == 16);  // the rule evaluator never stops early: 8 episodes x 2 turns
  CHECK(b.tokens.size(1) == trainer.action_space().sequence_length());
  CHECK(b.response_mask.sum().item<int64_t>() == 16 * trainer.action_space().slots());
  CHECK(b.group.max().item<int64_t>() == 1);
  CHECK(torch::equal(b.turn.narrow(0, 0, 4), torch::tensor({0, 1, 0, 1}, torch::kLong)));
  CHECK(r.observations[1].find("turn=1") != std::string::npos);
  // Rewards come from the environment: the reward policy's score of each turn's verdict.
  const std::vector<double> expected = KernelRewardPolicy(trainer.config().reward).rewards(kernel_evals(r));
  CHECK(r.batch.reward.abs().sum().item<double>() > 0);
  CHECK(torch::allclose(r.batch.reward, torch::tensor(expected, torch::kDouble).to(torch::kFloat)));
  const Metrics before = trainer.run_stages(r, BatchStage::Point::before_logp, 0);
  CHECK(before.count("kernel/correct") == 1);
  CHECK(before.count("filter/void_turns") == 1);
  CHECK(before.count("filter/groups_kept") == 1);
  trainer.recompute_old_logp(r.batch);
  // Rollout and trainer log-probs come from the same weights: they agree to rounding.
  CHECK(torch::allclose(r.batch.old_logp, r.batch.rollout_logp, 1e-5, 1e-5));
  const MismatchResult mm = trainer.correct_mismatch(r.batch);
  CHECK(mm.diagnostics.rejected_row_fraction.item<double>() == 0.0);
  CHECK(trainer.run_stages(r, BatchStage::Point::after_mismatch, 0).count("prs/drop_rate") == 1);
  const torch::Tensor adv = trainer.advantages(r.batch);
  CHECK(adv.size(0) == r.batch.size());
  const Metrics m = trainer.update(r.batch, adv, mm.weights, 1);
  CHECK(trainer.optimizer_steps() == 1);
  CHECK(std::isfinite(m.at("optim/grad_norm")));
  CHECK(m.at("optim/lr") == trainer.config().optimizer.lr);
}

TEST_CASE("at a sampling temperature the trainer scores the distribution the rollout drew from", "[trainer][mismatch]") {
  for (const bool at_temperature : {true, false}) {
    INFO("score_at_temperature " << at_temperature);
    TrainConfig c = test::tiny_config(test::fresh_dir("temperature"));
    c.sampling.temperature = 0.6;
    c.sampling.score_at_temperature = at_temperature;
    KernelTrainer trainer(c, rules());
    CHECK(trainer.policy().logp_temperature() == (at_temperature ? 0.6 : 1.0));
    RolloutBatch r = trainer.collect_rollouts(trainer.step_tasks(0), 4, rollout_sampling(c), 5);
    trainer.recompute_old_logp(r.batch);
    // Off: the trainer scores the temperature-1 distribution, a mismatch the correction sees.
    CHECK(torch::allclose(r.batch.old_logp, r.batch.rollout_logp, 1e-5, 1e-5) == at_temperature);
  }
}

TEST_CASE("PPO updates on a fixed batch lower its loss", "[trainer][loss]") {
  TrainConfig c = test::tiny_config(test::fresh_dir("fixed-batch"));
  c.optimizer.lr = 3e-3;
  c.optimizer.weight_decay = 0;
  c.policy_loss.loss_scale_factor = 1;
  KernelTrainer trainer(c, rules());
  RolloutBatch r = trainer.collect_rollouts(trainer.step_tasks(0), 4, rollout_sampling(c), 3);
  trainer.recompute_old_logp(r.batch);
  const MismatchResult mm = trainer.correct_mismatch(r.batch);
  const torch::Tensor adv = trainer.advantages(r.batch);
  REQUIRE(adv.abs().sum().item<double>() > 0);
  std::vector<double> losses;
  for (int i = 0; i < 8; ++i) losses.push_back(trainer.update(r.batch, adv, mm.weights, 1).at("actor/pg_loss"));
  INFO("losses " << losses.front() << " ... " << losses.back());
  CHECK(losses.back() < losses.front() - 1e-3);
  for (size_t i = 1; i < losses.size(); ++i) CHECK(losses[i] <= losses[i - 1] + 1e-6);
}

TEST_CASE("4 steps straight equal 2 steps, a resume and 2 more, bit for bit", "[trainer][resume]") {
  KernelTrainer straight(test::tiny_config(test::fresh_dir("straight"), 4), rules());
  straight.train();
  const std::string dir = test::fresh_dir("resumed");
  {
    KernelTrainer first(test::tiny_config(dir, 2), rules());
    first.train();
    CHECK(first.step() == 2);
  }
  KernelTrainer second(test::tiny_config(dir, 4), rules());
  second.train(/*resume=*/true);
  CHECK(second.step() == 4);
  CHECK(second.optimizer_steps() == straight.optimizer_steps());
  CHECK(identical(parameters_of(straight), parameters_of(second)));
  const auto a = metrics_of(straight.config().run.dir), b = metrics_of(dir);
  REQUIRE(b.size() == 4);
  CHECK(a[3].at("reward/mean") == b[3].at("reward/mean"));
  CHECK(a[3].at("actor/pg_loss") == b[3].at("actor/pg_loss"));
  // A second run into the same directory without --resume is refused.
  KernelTrainer again(test::tiny_config(dir, 4), rules());
  CHECK_THROWS_WITH(again.train(), Catch::Contains("--resume"));
}

// Run by the killed-run test in a child process (hidden from ctest): trains "forever".
TEST_CASE("child: train until killed", "[.][killed_child]") {
  const char* dir = std::getenv("TURNRL_KILLED_RUN_DIR");
  REQUIRE(dir);
  KernelTrainer trainer(test::tiny_config(dir, 100000), rules());
  trainer.train(/*resume=*/true);
}

TEST_CASE("a killed run resumes from its last complete checkpoint and matches an uninterrupted run", "[trainer][killed]") {
  const std::string dir = test::fresh_dir("killed");
  ::setenv("TURNRL_KILLED_RUN_DIR", dir.c_str(), 1);
  char self[] = "/proc/self/exe";
  char tag[] = "[killed_child]";
  char* argv[] = {self, tag, nullptr};
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, environ) == 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (true) {
    const auto latest = latest_checkpoint(dir + "/checkpoints");
    if (latest && latest->step >= 3) break;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  // Every checkpoint that is listed is complete and loads.
  const auto listed = list_checkpoints(dir + "/checkpoints");
  REQUIRE_FALSE(listed.empty());
  CHECK(listed.size() <= 3);  // keep_last
  for (const auto& entry : listed) {
    KernelTrainer probe(test::tiny_config(dir, 100000), rules());
    CHECK_NOTHROW(probe.load_checkpoint(entry.path));
    CHECK(probe.step() == entry.step);
  }
  const int64_t resumed_from = listed.back().step, target = resumed_from + 2;
  KernelTrainer resumed(test::tiny_config(dir, target), rules());
  resumed.train(/*resume=*/true);
  CHECK(resumed.step() == target);
  KernelTrainer straight(test::tiny_config(test::fresh_dir("killed-straight"), target), rules());
  straight.train();
  CHECK(identical(parameters_of(straight), parameters_of(resumed)));
  // metrics.jsonl holds each step once, whatever the killed run had logged after its checkpoint.
  const auto rows = metrics_of(dir);
  REQUIRE(int64_t(rows.size()) == target);
  for (int64_t i = 0; i < target; ++i) CHECK(rows[size_t(i)].at("step") == double(i + 1));
  for (const auto& entry : fs::directory_iterator(dir + "/checkpoints"))
    CHECK(entry.path().filename().string().rfind("step_", 0) == 0);
}

TEST_CASE("the trainer refuses settings it cannot run, naming the key", "[trainer][config]") {
  const std::string dir = test::fresh_dir("refuse");
  auto refused = [&](const std::function<void(TrainConfig&)>& edit) {
    TrainConfig c = test::tiny_config(dir);
    edit(c);
    try {
      KernelTrainer t(c, rules());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refused([](TrainConfig& c) { c.rejection.groups.target_groups = 4; }),
             Catch::Contains("target_groups") && Catch::Contains("allowed: 0"));
  CHECK_THAT(refused([](TrainConfig& c) { c.policy_loss.kl_loss_coef = 0.1; }), Catch::Contains("kl_loss_coef"));
  CHECK_THAT(refused([](TrainConfig& c) { c.tasks.include = {"no_such_task"}; }), Catch::Contains("no_such_task"));
  CHECK_THAT(refused([](TrainConfig& c) { c.model.max_seq = 12; }), Catch::Contains("model.max_seq"));
  const std::vector<std::string> built = built_evaluator_backends();
  if (std::find(built.begin(), built.end(), "cuda") == built.end()) {  // a CUDA build runs it (the GPU machine)
    TrainConfig cuda = test::tiny_config(dir);
    cuda.evaluator.backend = "cuda";
    CHECK_THROWS_WITH(KernelTrainer(cuda), Catch::Contains("evaluator.backend"));
  }
}

TEST_CASE("evaluation reports pass@k, fast@p per level and hacking counts", "[trainer][eval]") {
  TrainConfig c = test::tiny_config(test::fresh_dir("eval"));
  c.eval.samples = 4;
  c.eval.pass_k = {1, 4};
  KernelTrainer trainer(c, rules());
  const EvalReport report = evaluate_policy(trainer.policy(), trainer.collector(), trainer.train_tasks(), c.eval);
  REQUIRE(report.levels.size() >= 2);
  const LevelReport& all = report.levels.back();
  CHECK(all.level == 0);
  CHECK(all.tasks == int64_t(trainer.train_tasks().size()));
  CHECK(all.episodes == 4 * all.tasks);
  CHECK(all.pass_at_k.at(4) >= all.pass_at_k.at(1));
  CHECK(all.fast_at_p.at(1.0) >= all.fast_at_p.at(1.2));
  CHECK(report.to_text().find("pass@4") != std::string::npos);
  CHECK(report.to_metrics().count("eval/fast@1.2/all") == 1);
}

TEST_CASE("the learning-rate schedule warms up linearly and decays by cosine", "[trainer][schedule]") {
  OptimizerConfig o;
  o.lr = 1.0;
  o.warmup_steps = 4;
  o.schedule = "cosine";
  o.min_lr_ratio = 0.1;
  CHECK(scheduled_lr(o, 0, 14) == Approx(0.25));
  CHECK(scheduled_lr(o, 3, 14) == Approx(1.0));
  CHECK(scheduled_lr(o, 4, 14) == Approx(1.0));
  CHECK(scheduled_lr(o, 9, 14) == Approx(0.55));
  CHECK(scheduled_lr(o, 14, 14) == Approx(0.1));
  o.schedule = "constant";
  CHECK(scheduled_lr(o, 100, 14) == 1.0);
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What `body` printed on stderr (fd 2 redirected to a file meanwhile).
std::string stderr_of(const std::function<void()>& body) {
  const std::string path = test::fresh_dir("stderr") + "/stderr.txt";
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(file, 2);
  ::close(file);
  try {
    body();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  return read_text(path);
}

// Answers the start-up probe like a working backend (the candidate's fault) and every other
// request, or every request at all, with an internal error, as a pool without TMPDIR does.
class InternalErrorEvaluator : public KernelEvaluator {
 public:
  explicit InternalErrorEvaluator(bool answer_probe) : answer_probe_(answer_probe) {}
  std::vector<EvalResult> evaluate(const std::vector<EvalRequest>& requests) override {
    std::vector<EvalResult> out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const bool probe = requests[i].candidate == kProbeCandidate;
      out[i].error = probe && answer_probe_ ? EvalError::load : EvalError::internal;
      out[i].message = "cpu evaluator: cannot create a compile directory";
    }
    return out;
  }

 private:
  bool answer_probe_;
};

}  // namespace

TEST_CASE("an evaluator that cannot evaluate stops the run at start-up, and a step of only internal errors is not a step", "[trainer][edge]") {
  const std::string dir = test::fresh_dir("broken-evaluator");
  KernelTrainer at_start(test::tiny_config(dir, 2), std::make_shared<InternalErrorEvaluator>(false));
  CHECK_THROWS_WITH(at_start.train(), Catch::Contains("evaluator start-up check") &&
                                          Catch::Contains("cannot create a compile directory"));
  CHECK(at_start.step() == 0);
  KernelTrainer at_step(test::tiny_config(dir, 2), std::make_shared<InternalErrorEvaluator>(true));
  CHECK_THROWS_WITH(at_step.train(), Catch::StartsWith("step 1: all ") &&
                                         Catch::Contains("evaluations failed inside the evaluator"));
  CHECK(at_step.step() == 0);
  CHECK(read_metrics_jsonl(dir + "/metrics.jsonl").empty());  // no training step was recorded
  CHECK_FALSE(latest_checkpoint(dir + "/checkpoints").has_value());
}

TEST_CASE("resume falls back from a corrupt newest checkpoint and reports garbage lines of metrics.jsonl", "[trainer][resume][edge]") {
  const std::string dir = test::fresh_dir("corrupt-newest");
  {
    KernelTrainer first(test::tiny_config(dir, 3), rules());
    first.train();
  }
  const std::string newest = dir + "/checkpoints/" + checkpoint_name(3);
  fs::resize_file(newest + "/policy.pt", 16);  // a torn write or a bad disk
  std::ofstream(dir + "/metrics.jsonl", std::ios::app) << "garbage from somewhere\n";
  KernelTrainer resumed(test::tiny_config(dir, 4), rules());
  const std::string said = stderr_of([&] { resumed.train(/*resume=*/true); });
  CHECK(resumed.step() == 4);
  CHECK_THAT(said, Catch::Contains("checkpoint '" + newest + "' cannot be loaded") &&
                       Catch::Contains("resuming from the older '" + dir + "/checkpoints/" + checkpoint_name(2) + "'"));
  CHECK_THAT(said, Catch::Contains("dropped line 4 of '" + dir + "/metrics.jsonl'") &&
                       Catch::Contains("garbage from somewhere"));
  const auto rows = metrics_of(dir);
  REQUIRE(rows.size() == 4);
  for (size_t i = 0; i < rows.size(); ++i) CHECK(rows[i].at("step") == double(i + 1));
}

// Run by the write-failure test in a child process (hidden from ctest): resumes the run in
// $TURNRL_FSIZE_RUN_DIR to step 6 with files limited to $TURNRL_FSIZE_LIMIT bytes.
TEST_CASE("child: train with a file-size limit", "[.][fsize_child]") {
  const char* dir = std::getenv("TURNRL_FSIZE_RUN_DIR");
  const char* limit = std::getenv("TURNRL_FSIZE_LIMIT");
  REQUIRE(dir);
  REQUIRE(limit);
  ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG, as on a full disk
  const rlim_t bytes = std::strtoull(limit, nullptr, 10);
  const rlimit r{bytes, bytes};
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &r) == 0);
  TrainConfig c = test::tiny_config(dir, 6);
  c.run.samples_per_step = 0;
  KernelTrainer trainer(c, rules());
  try {
    trainer.train(/*resume=*/true);
  } catch (const Error& e) {  // for the parent, unwrapped (Catch wraps long messages)
    std::ofstream(std::string(dir) + "/../child_error.txt") << e.what();
    throw;
  }
}

TEST_CASE("failing writes end the run with a message naming the file, and the last good checkpoint stays", "[trainer][edge]") {
  const std::string dir = test::fresh_dir("fsize") + "/run";  // the child's message goes next to it
  TrainConfig c = test::tiny_config(dir, 2);
  c.run.samples_per_step = 0;
  {
    KernelTrainer first(c, rules());
    first.train();
  }
  const auto policy_bytes = fs::file_size(dir + "/checkpoints/" + checkpoint_name(2) + "/policy.pt");
  const auto metrics_bytes = fs::file_size(dir + "/metrics.jsonl");
  const auto line_bytes = metrics_bytes / 2;
  const auto config_bytes = fs::file_size(dir + "/config.yaml");
  auto run_child = [&](uintmax_t limit) {
    ::setenv("TURNRL_FSIZE_RUN_DIR", dir.c_str(), 1);
    ::setenv("TURNRL_FSIZE_LIMIT", std::to_string(limit).c_str(), 1);
    const std::string log = dir + "/child.log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char self[] = "/proc/self/exe";
    char tag[] = "[fsize_child]";
    char* argv[] = {self, tag, nullptr};
    pid_t pid = 0;
    REQUIRE(::posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0;
    ::waitpid(pid, &status, 0);
    INFO(read_text(log));
    CHECK(WIFEXITED(status));  // an error and a message, never SIGABRT or SIGXFSZ
    CHECK(WEXITSTATUS(status) != 0);
    return read_text(dir + "/../child_error.txt");
  };
  // Metrics: room for less than one more line. The step's line cannot be written: the run stops there.
  REQUIRE(config_bytes < metrics_bytes + line_bytes / 2);
  CHECK_THAT(run_child(metrics_bytes + line_bytes / 2),
             Catch::Contains("cannot write '" + dir + "/metrics.jsonl': File too large"));
  CHECK(latest_checkpoint(dir + "/checkpoints")->step == 2);
  // Checkpoints: room for two more metrics lines but not for a policy. The step-3 checkpoint fails
  // and step 2's stays whole and loadable.
  REQUIRE(metrics_bytes + 3 * line_bytes < policy_bytes);
  CHECK_THAT(run_child(metrics_bytes + 3 * line_bytes),
             Catch::Contains("checkpoint: cannot write '") && Catch::Contains("policy.pt'") &&
                 Catch::Contains("File too large"));
  const auto listed = list_checkpoints(dir + "/checkpoints");
  REQUIRE_FALSE(listed.empty());
  CHECK(listed.back().step == 2);
  CHECK(remove_incomplete_checkpoints(dir + "/checkpoints") == 0);
  KernelTrainer probe(c, rules());
  CHECK_NOTHROW(probe.load_checkpoint(listed.back().path));
  CHECK(probe.step() == 2);
}

TEST_CASE("token-budget micro-batches give the single-batch loss and gradient norm", "[trainer][loss]") {
  const int64_t width = KernelTrainer(test::tiny_config(test::fresh_dir("micro-batches-probe")), rules())
                            .action_space()
                            .sequence_length();
  for (const LossAggMode mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum, LossAggMode::seq_sum_no_norm}) {
    INFO(to_string(mode));
    std::vector<Metrics> results;
    for (const bool split : {false, true}) {
      TrainConfig c = test::tiny_config(test::fresh_dir("micro-batches"));
      c.policy_loss.agg_mode = mode;
      c.trainer.micro_batch_size = split ? 3 : 1000;
      c.trainer.micro_batch_tokens = split ? 2 * width : 0;  // two rows a micro-batch
      KernelTrainer trainer(c, rules());
      RolloutBatch r = trainer.collect_rollouts(trainer.step_tasks(0), 4, rollout_sampling(c), 3);
      // Ragged rows: each turn keeps a different number of its response tokens.
      const torch::Tensor keep =
          torch::arange(width).unsqueeze(0) < (torch::arange(r.batch.size()) % width + 1).unsqueeze(1);
      r.batch.response_mask = r.batch.response_mask & keep;
      trainer.recompute_old_logp(r.batch);
      const MismatchResult mm = trainer.correct_mismatch(r.batch);
      const torch::Tensor adv = trainer.advantages(r.batch);
      REQUIRE(adv.abs().sum().item<double>() > 0);
      results.push_back(trainer.update(r.batch, adv, mm.weights, 1));
    }
    CHECK(results[0].at("actor/micro_batches") == 1);
    CHECK(results[1].at("actor/micro_batches") > 3);
    CHECK(results[1].at("actor/loss") == Approx(results[0].at("actor/loss")).epsilon(1e-5));
    CHECK(results[1].at("optim/grad_norm") == Approx(results[0].at("optim/grad_norm")).epsilon(1e-5));
    CHECK(results[0].at("optim/grad_norm") > 0);
  }
}
