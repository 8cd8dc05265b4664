// Data-parallel training on CPUs through the TCP communicator. Ranks are child processes of this
// test binary (hidden test cases) with torchrun's environment variables, as `turnrl train --nproc`
// runs them; the deterministic plan evaluator makes every rank's rollouts reproducible.
#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <torch/serialize.h>

#include "turnrl/trainer/distributed.h"
#include "turnrl/trainer/trainer.h"
#include "support/loopback.h"
#include "trainer/trainer_test_support.h"

extern char** environ;

using namespace turnrl;

namespace {

std::shared_ptr<KernelEvaluator> rules() { return std::make_shared<test::PlanRuleEvaluator>(); }

// Two PPO epochs over 5-row micro-batches: shuffled orders and several micro-batches per rank.
TrainConfig dp_config(const std::string& dir) {
  TrainConfig c = test::tiny_config(dir, 2);
  c.trainer.ppo_epochs = 2;
  c.distributed.timeout_seconds = 60;
  return c;
}

constexpr uint64_t kRolloutSeed = 99;

std::vector<torch::Tensor> parameters_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.policy().parameters()) out.push_back(p.detach().clone());
  return out;
}

// Runs the hidden test case `tag` as ranks 0..world-1 of one world; returns their exit statuses.
std::vector<int> run_ranks(const std::string& tag, int world, const std::string& dir) {
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

std::string rank_file(const std::string& dir, int rank, const std::string& what) {
  return dir + "/rank" + std::to_string(rank) + "_" + what;
}

RolloutBatch whole_batch(Trainer& t) {
  const TrainConfig& c = t.config();
  return t.collect_rollouts(t.step_tasks(0), c.trainer.samples_per_task, rollout_sampling(c), kRolloutSeed);
}

}  // namespace

// One rank of the two-rank test below (hidden from ctest): collects the same whole batch as the
// one-process trainer, keeps its contiguous share of the episodes, gathers, learns, saves.
TEST_CASE("child: one rank learning from its shard of a batch", "[.][dp_rank_child]") {
  const char* dir = std::getenv("TURNRL_DP_DIR");
  REQUIRE(dir);
  Trainer t(dp_config(std::string(dir) + "/run"), rules());
  REQUIRE(t.world_size() == 2);
  const RolloutBatch whole = whole_batch(t);
  const int64_t episodes = int64_t(whole.task_ids.size()) * t.config().trainer.samples_per_task;
  const int64_t first = episodes * t.rank() / 2, end = episodes * (t.rank() + 1) / 2;
  RolloutBatch shard = select_rollout_rows(whole, whole.batch.traj.ge(first).logical_and(whole.batch.traj.lt(end)));
  shard.episodes = end - first;  // as collect_rollout_shard counts them
  REQUIRE(shard.batch.size() < whole.batch.size());
  RolloutBatch gathered = t.gather_rollouts(shard);
  // The gather rebuilds the whole batch, row for row.
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
  for (size_t i = 0; i < whole.evals.size(); ++i) CHECK(gathered.evals[i].speedup == whole.evals[i].speedup);
  const Metrics m = t.learn(gathered);
  torch::save(parameters_of(t), rank_file(dir, t.rank(), "params.pt"));
  std::ofstream(rank_file(dir, t.rank(), "metrics.json")) << metrics_to_json(m) << "\n";
}

TEST_CASE("two ranks learning from a batch's shards end with one rank's parameters on the whole batch",
          "[trainer][distributed]") {
  const std::string dir = test::fresh_dir("dp2");
  const std::vector<int> statuses = run_ranks("[dp_rank_child]", 2, dir);
  for (int s : statuses) REQUIRE((WIFEXITED(s) && WEXITSTATUS(s) == 0));

  Trainer one(dp_config(dir + "/one"), rules());
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
    // Every rank applies the same summed gradient: bitwise the same parameters.
    CHECK(torch::equal(rank0[i], rank1[i]));
    // One rank on the whole batch: the same up to float summation order.
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

TEST_CASE("a one-rank world through a communicator trains exactly as the plain trainer", "[trainer][distributed]") {
  DistributedEnv env;  // rank 0 of 1: no peers, no sockets
  Trainer plain(test::tiny_config(test::fresh_dir("dp1-plain"), 2), rules());
  Trainer ranked(test::tiny_config(test::fresh_dir("dp1-ranked"), 2), rules(),
                 std::shared_ptr<Communicator>(make_communicator(env, torch::kCPU)));
  REQUIRE(ranked.world_size() == 1);
  for (int step = 0; step < 2; ++step) {
    const Metrics a = plain.train_step(), b = ranked.train_step();
    for (const auto& [key, value] : a)
      if (key.rfind("time/", 0) != 0 && key.rfind("perf/", 0) != 0) CHECK(b.at(key) == value);
  }
  const auto pa = parameters_of(plain), pb = parameters_of(ranked);
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
}

TEST_CASE("a rank cannot collect episodes outside the step", "[trainer][distributed]") {
  Trainer t(test::tiny_config(test::fresh_dir("dp-shard"), 1), rules());
  const auto tasks = t.step_tasks(0);
  CHECK_THROWS_WITH(t.collect_rollout_shard(tasks, 4, 3, 9, rollout_sampling(t.config()), 1),
                    Catch::Contains("episodes [3, 9)"));
  // An empty shard (more ranks than episodes) is a valid, empty batch.
  const RolloutBatch none = t.collect_rollout_shard(tasks, 4, 2, 2, rollout_sampling(t.config()), 1);
  CHECK(none.batch.size() == 0);
  CHECK(none.episodes == 0);
}
