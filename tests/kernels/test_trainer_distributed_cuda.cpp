// Data-parallel training on GPUs: the one-rank world on one GPU against the plain trainer, and
// (with two or more GPUs) two NCCL ranks against one process on the same batch, plus the NCCL
// communicator's sums. Each case says SKIPPED where the machine has too few GPUs.
#include <catch2/catch.hpp>

#include <thread>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/cuda.h>

#include "kernels/dp_test_support.h"
#include "turnrl/rl/distributed.h"

using namespace turnrl;

namespace {

bool skip_below(int gpus) {
  const int have = at::hasCUDA() ? int(torch::cuda::device_count()) : 0;
  if (have >= gpus) return false;
  WARN("SKIPPED: needs " << gpus << " GPU(s), " << have << " visible");
  return true;
}

TrainConfig gpu_config(const std::string& dir) {
  TrainConfig c = test::tiny_config(dir, 2);
  c.trainer.ppo_epochs = 2;
  c.model.device = "cuda";
  c.distributed.backend = "nccl";
  c.distributed.timeout_seconds = 120;
  return c;
}

}  // namespace

TEST_CASE("one GPU: a one-rank world through a communicator trains exactly as the plain trainer", "[cuda]") {
  if (skip_below(1)) return;
  DistributedEnv env;
  KernelTrainer plain(gpu_config(test::fresh_dir("dp1-gpu-plain")), std::make_shared<test::PlanRuleEvaluator>());
  KernelTrainer ranked(gpu_config(test::fresh_dir("dp1-gpu-ranked")), std::make_shared<test::PlanRuleEvaluator>(),
                 std::shared_ptr<Communicator>(make_communicator(env, torch::Device(torch::kCUDA, 0))));
  REQUIRE(ranked.world_size() == 1);
  for (int step = 0; step < 2; ++step) {
    const Metrics a = plain.train_step(), b = ranked.train_step();
    for (const auto& [key, value] : a)
      if (key.rfind("time/", 0) != 0 && key.rfind("perf/", 0) != 0) CHECK(b.at(key) == Approx(value).epsilon(1e-6));
  }
  const auto pa = test::parameters_of(plain), pb = test::parameters_of(ranked);
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::allclose(pa[i], pb[i], 1e-6, 1e-7));
}

TEST_CASE("child: one NCCL rank learning from its shard of a batch", "[.][dp_nccl_rank_child]") {
  test::dp_rank_child(gpu_config(std::string(std::getenv("TURNRL_DP_DIR")) + "/run"));
}

TEST_CASE("two GPUs: two NCCL ranks end with one process's parameters on the whole batch", "[cuda]") {
  if (skip_below(2)) return;
  REQUIRE(nccl_available());
  const std::string dir = test::fresh_dir("dp2-nccl");
  for (int s : test::run_ranks("[dp_nccl_rank_child]", 2, dir)) REQUIRE((WIFEXITED(s) && WEXITSTATUS(s) == 0));
  test::check_two_ranks_match_one(dir, gpu_config(dir + "/one"));
}

TEST_CASE("two GPUs: the NCCL communicator sums float, half and bfloat16 tensors over ranks", "[cuda]") {
  if (skip_below(2)) return;
  REQUIRE(nccl_available());
  const int port = testing::free_loopback_port();
  std::vector<std::vector<float>> sums(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        DistributedEnv env;
        env.rank = r, env.world_size = 2, env.local_rank = r, env.master_port = port;
        const torch::Device device(torch::kCUDA, c10::DeviceIndex(r));
        auto comm = make_communicator(env, device, CommunicatorOptions{"nccl", 60});
        if (comm->backend() != "nccl") throw std::runtime_error("backend " + comm->backend());
        for (auto dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
          torch::Tensor t = torch::full({1000}, float(r + 1), torch::dtype(dtype).device(device));
          comm->all_reduce_sum(t);
          at::cuda::getCurrentCUDAStream(device.index()).synchronize();
          sums[size_t(r)].push_back(t.to(torch::kCPU, torch::kFloat).sum().item<float>());
        }
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[size_t(r)]);
    REQUIRE(errors[size_t(r)].empty());
    REQUIRE(sums[size_t(r)].size() == 3);
    for (float s : sums[size_t(r)]) CHECK(s == 3000.0f);  // (1 + 2) x 1000, exact in every dtype
  }
}
