#pragma once
// The kernel recipe: today's kernel trainer built from one TrainConfig on the generic Trainer.
//   env.action: plan  a TransformerPolicy behind PlanPolicy, PlanActionCodec (compact states)
//   env.action: code  the policy of model.* (policy_factory.h: the builtin one over the byte chat
//                     tokenizer, or a HuggingFace checkpoint over its BPE tokenizer and chat
//                     template), ChatCodec: the policy writes a fenced code block, KernelEnv
//                     evaluates it, its feedback is the next turn
// Both: KernelEnv pools over one evaluator (evaluator.*), the tasks of tasks.*, and the stages
// EvaluatorHealthStage, KernelMetricsStage, MeaningfulTurnMaskStage, GroupFilterStage, PrsStage, and a
// start-up check that probes the evaluator once before the first step (evaluator_health.h).
#include <memory>
#include <utility>

#include "turnrl/rl/task.h"
#include "turnrl/kernels/evaluator.h"
#include "turnrl/model/chat_tokenizer.h"
#include "turnrl/kernels/config.h"
#include "turnrl/kernels/plan_actions.h"
#include "turnrl/rl/trainer.h"

namespace turnrl {

class Communicator;

// What kernel_recipe builds: the trainer's parts and the domain objects behind them.
struct KernelRecipe {
  TrainConfig config;
  TaskSet train_tasks, validation_tasks;
  std::shared_ptr<KernelEvaluator> evaluator;
  std::shared_ptr<const PlanActionSpace> plan_space;  // env.action: plan
  std::shared_ptr<const ChatTokenizer> tokenizer;     // env.action: code
  TrainerParts parts;
};

// Builds the policy (seeded by trainer.seed, on model.device; with several ranks, the rank's GPU),
// the codec, the environments and the stages. evaluator: null = the one evaluator.* names. comm:
// the ranks (for the device), as Trainer takes them. Throws turnrl::Error for settings the kernel
// trainer cannot run (a backend that is not built, rejection.group_filter.target_groups > 0, ...).
KernelRecipe kernel_recipe(TrainConfig config, std::shared_ptr<KernelEvaluator> evaluator = nullptr,
                           const Communicator* comm = nullptr);

// A Trainer made by kernel_recipe, with the domain objects at hand (what `turnrl train` runs).
class KernelTrainer : public Trainer {
 public:
  explicit KernelTrainer(TrainConfig config, std::shared_ptr<KernelEvaluator> evaluator = nullptr,
                         std::shared_ptr<Communicator> comm = nullptr);

  const TrainConfig& config() const { return recipe_.config; }
  const TaskSet& train_tasks() const { return recipe_.train_tasks; }
  const TaskSet& validation_tasks() const { return recipe_.validation_tasks; }
  KernelEvaluator& evaluator() { return *recipe_.evaluator; }
  // The plan action space; throws unless env.action is plan.
  const PlanActionSpace& action_space() const;

 private:
  KernelTrainer(KernelRecipe recipe, std::shared_ptr<Communicator> comm);
  KernelRecipe recipe_;
};

// The evaluator a config names (evaluator.*).
std::shared_ptr<KernelEvaluator> make_evaluator(const TrainConfig& config);

// The training and validation task sets a config names (tasks.*).
std::pair<TaskSet, TaskSet> load_task_sets(const TrainConfig& config);

}  // namespace turnrl
