// A custom training loop built from the Trainer's stages: the same pipeline as Trainer::train_step,
// with a user-registered advantage estimator and a policy update only on turns whose kernel
// compiled. Shows that each stage is callable on its own.
//
//   build/bin/custom_trainer [CONFIG] [--set key=value ...]      (default: the shipped cpu_default.yaml)
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "turnrl/algo/advantage.h"
#include "turnrl/core/install_paths.h"
#include "turnrl/kernels/kernel_reward.h"
#include "turnrl/kernels/kernel_recipe.h"
#include "turnrl/kernels/kernel_stages.h"

using namespace turnrl;

int main(int argc, char** argv) {
  std::string config_file;
  std::vector<std::string> overrides = {"trainer.steps=5", "run.dir=runs/custom_trainer"};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set" && i + 1 < argc) overrides.push_back(argv[++i]);
    else config_file = arg;
  }

  // 1. A user estimator: TRLOO, but advantages scaled down on the last turn (a made-up variant).
  register_advantage_estimator("trloo_damped_last", [](const TurnBatch& b, const torch::Tensor& g, const AdvantageOptions& o) {
    const torch::Tensor a = trloo_advantage(b, g, o);
    return torch::where(b.turn == b.max_turns - 1, 0.5 * a, a);
  });
  overrides.push_back("advantage.estimator=trloo_damped_last");

  try {
    // Default: the shipped CPU config, found beside the installed turnrl (or in a build's source tree).
    if (config_file.empty()) config_file = find_turnrl_file(TurnrlFiles::data, "configs/cpu_default.yaml");
    KernelTrainer trainer(load_config(config_file, overrides));
    const TrainConfig& c = trainer.config();
    const uint64_t seed = uint64_t(c.trainer.seed);
    for (int64_t step = 0; step < c.trainer.steps; ++step) {
      // 2. Rollouts (rewards come from the environment) and the recipe's stages before the old
      //    log-probs (kernel metrics, meaningful-turn mask, group filters), as the built-in step.
      RolloutBatch r = trainer.collect_rollouts(trainer.step_tasks(step), c.trainer.samples_per_task,
                                                rollout_sampling(c), stage_seed(seed, step, StageSeed::rollout));
      const double reward = rollout_metrics(r).at("reward/mean");
      const Metrics seen = trainer.run_stages(r, BatchStage::Point::before_logp, step);
      if (r.batch.size() == 0) continue;

      // 3. Our own rule: no gradient for turns that did not compile (they still count in the
      //    baselines, like the paper's rejections).
      std::vector<uint8_t> compiled;
      for (const EvalResult& e : kernel_evals(r)) compiled.push_back(e.stage >= EvalStage::compiled);
      const torch::Tensor keep = torch::tensor(std::vector<int64_t>(compiled.begin(), compiled.end())).to(torch::kBool);
      r.batch.response_mask = r.batch.response_mask & keep.to(r.batch.response_mask.device()).unsqueeze(1);

      // 4. The rest of the built-in pipeline.
      trainer.recompute_old_logp(r.batch);
      const MismatchResult mismatch = trainer.correct_mismatch(r.batch);
      trainer.run_stages(r, BatchStage::Point::after_mismatch, step);  // PRS
      const torch::Tensor adv = trainer.advantages(r.batch);
      const Metrics m = trainer.update(r.batch, adv, mismatch.weights, stage_seed(seed, step, StageSeed::epoch_order));
      fmt::print("step {}: reward {:.3f}  correct {:.2f}  fast@1.2 {:.2f}  trained turns {}\n", step + 1,
                 reward, seen.at("kernel/correct"), seen.at("kernel/fast@1.2"),
                 m.at("actor/rows"));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_trainer: %s\n", e.what());
    return 1;
  }
  return 0;
}
