// Data-parallel training on CPUs through the TCP communicator: two ranks (child processes of this
// test binary, as `turnrl train --nproc` runs them) against one process on the same batch, the
// one-rank world against the plain trainer, and episode shards.
#include <catch2/catch.hpp>

#include "kernels/dp_test_support.h"
#include "turnrl/rl/distributed.h"

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

}  // namespace

// One rank of the two-rank test below (hidden from ctest).
TEST_CASE("child: one rank learning from its shard of a batch", "[.][dp_rank_child]") {
  test::dp_rank_child(dp_config(std::string(std::getenv("TURNRL_DP_DIR")) + "/run"));
}

TEST_CASE("two ranks learning from a batch's shards end with one rank's parameters on the whole batch",
          "[trainer][distributed]") {
  const std::string dir = test::fresh_dir("dp2");
  for (int s : test::run_ranks("[dp_rank_child]", 2, dir)) REQUIRE((WIFEXITED(s) && WEXITSTATUS(s) == 0));
  test::check_two_ranks_match_one(dir, dp_config(dir + "/one"));
}

TEST_CASE("a one-rank world through a communicator trains exactly as the plain trainer", "[trainer][distributed]") {
  DistributedEnv env;  // rank 0 of 1: no peers, no sockets
  KernelTrainer plain(test::tiny_config(test::fresh_dir("dp1-plain"), 2), rules());
  KernelTrainer ranked(test::tiny_config(test::fresh_dir("dp1-ranked"), 2), rules(),
                 std::shared_ptr<Communicator>(make_communicator(env, torch::kCPU)));
  REQUIRE(ranked.world_size() == 1);
  for (int step = 0; step < 2; ++step) {
    const Metrics a = plain.train_step(), b = ranked.train_step();
    for (const auto& [key, value] : a)
      if (key.rfind("time/", 0) != 0 && key.rfind("perf/", 0) != 0) CHECK(b.at(key) == value);
  }
  const auto pa = test::parameters_of(plain), pb = test::parameters_of(ranked);
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
}

TEST_CASE("a rank cannot collect episodes outside the step", "[trainer][distributed]") {
  KernelTrainer t(test::tiny_config(test::fresh_dir("dp-shard"), 1), rules());
  const auto tasks = t.step_tasks(0);
  CHECK_THROWS_WITH(t.collect_rollout_shard(tasks, 4, 3, 9, rollout_sampling(t.config()), 1),
                    Catch::Contains("episodes [3, 9)"));
  // An empty shard (more ranks than episodes) is a valid, empty batch.
  const RolloutBatch none = t.collect_rollout_shard(tasks, 4, 2, 2, rollout_sampling(t.config()), 1);
  CHECK(none.batch.size() == 0);
  CHECK(none.episodes == 0);
}
