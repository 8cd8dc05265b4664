#pragma once
// Shared by the data-parallel trainer tests (CPU: test_trainer_distributed.cpp, GPU/NCCL:
// test_trainer_distributed_cuda.cpp). Ranks are child processes of the test binary running a
// hidden test case, with torchrun's environment variables; each rank collects the same whole
// batch (the deterministic plan evaluator), keeps its contiguous share of the episodes, gathers,
// learns and saves its parameters; the parent compares them with one process on the whole batch.
#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <torch/serialize.h>

#include "support/loopback.h"
#include "kernels/trainer_test_support.h"
#include "turnrl/kernels/kernel_recipe.h"
#include "turnrl/kernels/kernel_stages.h"

extern char** environ;

namespace turnrl::test {

constexpr uint64_t kDpRolloutSeed = 99;

inline std::vector<torch::Tensor> parameters_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.policy().parameters()) out.push_back(p.detach().cpu().clone());
  return out;
}

inline std::string rank_file(const std::string& dir, int rank, const std::string& what) {
  return dir + "/rank" + std::to_string(rank) + "_" + what;
}

// Runs the hidden test case `tag` as ranks 0..world-1 of one world (TURNRL_DP_DIR = dir); waits.
inline std::vector<int> run_ranks(const std::string& tag, int world, const std::string& dir) {
  const int port = testing::free_loopback_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> vars;
    for (char** e = environ; *e; ++e) vars.push_back(*e);
    for (const auto& [k, v] : std::map<std::string, std::string>{{"RANK", std::to_string(rank)},
                                                                  {"LOCAL_RANK", std::to_string(rank)},
                                                                  {"WORLD_SIZE", std::to_string(world)},
                                                                  {"MASTER_ADDR", "127.0.0.1"},
                                                                  {"MASTER_PORT", std::to_string(port)},
                                                                  {"TURNRL_DP_DIR", dir}})
      vars.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe", t = tag;
    char* argv[] = {self.data(), t.data(), nullptr};
    pid_t pid = 0;
    REQUIRE(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) == 0);
    pids.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    statuses.push_back(status);
  }
  return statuses;
}

inline RolloutBatch whole_batch(KernelTrainer& t) {
  const TrainConfig& c = t.config();
  return t.collect_rollouts(t.step_tasks(0), c.trainer.samples_per_task, rollout_sampling(c), kDpRolloutSeed);
}

// The body of a rank (inside the hidden test case): its share, the gather (which must rebuild the
// whole batch row for row), learn, and its parameters and metrics under TURNRL_DP_DIR.
inline void dp_rank_child(const TrainConfig& config) {
  const char* dir = std::getenv("TURNRL_DP_DIR");
  REQUIRE(dir);
  KernelTrainer t(config, std::make_shared<PlanRuleEvaluator>());
  REQUIRE(t.world_size() == 2);
  const RolloutBatch whole = whole_batch(t);
  const int64_t episodes = int64_t(whole.task_ids.size()) * t.config().trainer.samples_per_task;
  const int64_t first = episodes * t.rank() / 2, end = episodes * (t.rank() + 1) / 2;
  RolloutBatch shard = select_rollout_rows(whole, whole.batch.traj.ge(first).logical_and(whole.batch.traj.lt(end)));
  shard.episodes = end - first;  // as collect_rollout_shard counts them
  REQUIRE(shard.batch.size() < whole.batch.size());
  RolloutBatch gathered = t.gather_rollouts(shard);
  REQUIRE(gathered.batch.size() == whole.batch.size());
  CHECK(torch::equal(gathered.batch.traj, whole.batch.traj));
  CHECK(torch::equal(gathered.batch.group, whole.batch.group));
  CHECK(torch::equal(gathered.batch.turn, whole.batch.turn));
  CHECK(torch::equal(gathered.batch.tokens, whole.batch.tokens));
  CHECK(torch::equal(gathered.batch.response_mask, whole.batch.response_mask));
  CHECK(torch::equal(gathered.batch.rollout_logp, whole.batch.rollout_logp));
  CHECK(gathered.actions == whole.actions);
  CHECK(gathered.observations == whole.observations);
  CHECK(gathered.episodes == episodes);
  CHECK(torch::equal(gathered.batch.reward, whole.batch.reward));
  CHECK(torch::equal(gathered.batch.attention_mask, whole.batch.attention_mask));
  const std::vector<EvalResult> gathered_evals = kernel_evals(gathered), whole_evals = kernel_evals(whole);
  for (size_t i = 0; i < whole_evals.size(); ++i) CHECK(gathered_evals[i].speedup == whole_evals[i].speedup);
  const Metrics m = t.learn(gathered);
  torch::save(parameters_of(t), rank_file(dir, t.rank(), "params.pt"));
  std::ofstream(rank_file(dir, t.rank(), "metrics.json")) << metrics_to_json(m) << "\n";
}

// The parent: the ranks' parameters equal each other bit for bit (every rank applies the same
// summed gradient) and one process's on the whole batch to fp32 tolerance; metrics agree.
inline void check_two_ranks_match_one(const std::string& dir, const TrainConfig& one_config) {
  KernelTrainer one(one_config, std::make_shared<PlanRuleEvaluator>());
  REQUIRE(one.world_size() == 1);
  const std::vector<torch::Tensor> initial = parameters_of(one);
  RolloutBatch whole = whole_batch(one);
  const Metrics m = one.learn(whole);
  const std::vector<torch::Tensor> expected = parameters_of(one);
  std::vector<torch::Tensor> rank0, rank1;
  torch::load(rank0, rank_file(dir, 0, "params.pt"));
  torch::load(rank1, rank_file(dir, 1, "params.pt"));
  REQUIRE(rank0.size() == expected.size());
  REQUIRE(rank1.size() == expected.size());
  double moved = 0, worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(torch::equal(rank0[i], rank1[i]));
    CHECK(torch::allclose(rank0[i], expected[i], /*rtol=*/1e-5, /*atol=*/1e-6));
    moved = std::max(moved, (expected[i] - initial[i]).abs().max().item<double>());
    worst = std::max(worst, (rank0[i] - expected[i]).abs().max().item<double>());
  }
  CHECK(moved > 1e-3);  // the step changed the model, so the comparison means something
  INFO("largest parameter difference between 2 ranks and 1: " << worst);
  CHECK(worst < 1e-5);
  const Metrics two = read_metrics_jsonl(rank_file(dir, 0, "metrics.json")).at(0);
  for (const char* key : {"reward/mean", "kernel/correct", "adv/abs_mean", "returns/mean", "actor/rows"})
    CHECK(two.at(key) == Approx(m.at(key)).epsilon(1e-12));
  for (const char* key : {"actor/loss", "optim/grad_norm"}) CHECK(two.at(key) == Approx(m.at(key)).epsilon(1e-4));
}

}  // namespace turnrl::test
