#include "turnrl/kernels/kernel_recipe.h"

#include <algorithm>
#include <tuple>

#include <torch/cuda.h>
#include <torch/utils.h>

#include "turnrl/core/error.h"
#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/kernels/kernel_env.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/kernels/backends.h"
#include "turnrl/kernels/evaluator_health.h"
#include "turnrl/rl/chat_codec.h"
#include "turnrl/rl/distributed.h"
#include "turnrl/kernels/kernel_stages.h"
#include "turnrl/rl/policy_factory.h"
#include "turnrl/model/transformer.h"

namespace turnrl {

std::shared_ptr<KernelEvaluator> make_evaluator(const TrainConfig& c) { return make_evaluator(c.evaluator); }

std::pair<TaskSet, TaskSet> load_task_sets(const TrainConfig& c) {
  const TaskSet all = c.tasks.source == "file" ? load_tasks_jsonl(c.tasks.file) : builtin_tasks(builtin_task_backend(c.evaluator));
  TaskSet chosen;
  if (c.tasks.include.empty()) {
    const std::vector<std::string> planned = plan_task_names(c.evaluator.backend);
    for (const Task& t : all.tasks)
      if (std::find(planned.begin(), planned.end(), t.id) != planned.end()) chosen.tasks.push_back(t);
  } else {
    for (const std::string& id : c.tasks.include) chosen.tasks.push_back(all.find(id));
  }
  if (chosen.tasks.empty()) fail("tasks: no task selected (source '{}', include [{}])", c.tasks.source, fmt::join(c.tasks.include, ", "));
  auto [train, validation] = chosen.split(c.tasks.validation_fraction, uint64_t(c.tasks.split_seed));
  if (train.tasks.empty())
    fail("tasks.validation_fraction: {} leaves no training task out of {}", c.tasks.validation_fraction, chosen.size());
  return {train, validation};
}

namespace {

// model.device, and with several ranks on GPUs one GPU per rank (LOCAL_RANK mod the visible count).
torch::Device training_device(const TrainConfig& c, const Communicator* comm) {
  if (c.model.device == "cuda" && !torch::cuda::is_available())
    fail("model.device: 'cuda' but LibTorch sees no CUDA device; allowed here: cpu");
  if (c.model.device != "cuda") return torch::kCPU;
  const DistributedEnv env = comm ? DistributedEnv{comm->rank(), comm->world_size(), comm->rank()}
                                  : distributed_env_from_environment();
  if (env.world_size > 1) return torch::Device(torch::kCUDA, c10::DeviceIndex(env.local_rank % int(torch::cuda::device_count())));
  return torch::Device(torch::kCUDA);
}

void check_plan_templates(const TaskSet& tasks) {
  for (const Task& t : tasks.tasks) {
    const std::vector<std::string> planned = plan_task_names(t.backend);
    if (std::find(planned.begin(), planned.end(), t.id) == planned.end())
      fail("tasks.include: task '{}' (backend {}) has no kernel-plan template; allowed: {}", t.id, t.backend,
           fmt::join(planned, ", "));
  }
}

}  // namespace

KernelRecipe kernel_recipe(TrainConfig config, std::shared_ptr<KernelEvaluator> evaluator, const Communicator* comm) {
  KernelRecipe k;
  k.config = std::move(config);
  const TrainConfig& c = k.config;
  k.evaluator = evaluator ? std::move(evaluator) : make_evaluator(c);
  if (c.rejection.groups.target_groups != 0)
    fail("rejection.group_filter.target_groups: {} is not supported by the kernel trainer (it trains on every "
         "surviving group each step; use GroupCarryOver in a custom loop); allowed: 0",
         c.rejection.groups.target_groups);
  const torch::Device device = training_device(c, comm);
  if (c.trainer.threads > 0) torch::set_num_threads(int(c.trainer.threads));
  std::tie(k.train_tasks, k.validation_tasks) = load_task_sets(c);

  check_model_config(c.model);
  if (c.env.action == ActionFormat::plan && c.model.type != "builtin")
    fail("env.action: 'plan' needs model.type builtin (the plan policy's vocabulary is the plan slots' choices, not a "
         "tokenizer's); allowed with model.type {}: code",
         c.model.type);
  if (c.env.action == ActionFormat::plan) {
    check_plan_templates(k.train_tasks);
    check_plan_templates(k.validation_tasks);
    TaskSet all = k.train_tasks;
    all.tasks.insert(all.tasks.end(), k.validation_tasks.tasks.begin(), k.validation_tasks.tasks.end());
    auto space = std::make_shared<const PlanActionSpace>(all, c.env.max_turns);
    const int64_t max_seq = builtin_max_seq(c.model);
    if (max_seq < space->sequence_length())
      fail("model.max_seq: {} is shorter than a plan turn ({} tokens); allowed: >= {}", max_seq,
           space->sequence_length(), space->sequence_length());
    k.plan_space = space;
    k.parts.codec = std::make_shared<PlanActionCodec>(space);
    torch::manual_seed(uint64_t(c.trainer.seed));
    k.parts.policy = std::make_shared<PlanPolicy>(space, make_builtin_policy(c.model, space->vocab_size(), max_seq, device));
  } else {
    ChatPolicy chat = make_chat_policy(c.model, uint64_t(c.trainer.seed), device);
    k.tokenizer = chat.tokenizer;
    k.parts.policy = chat.policy;
    k.parts.codec = std::make_shared<ChatCodec>(k.tokenizer, c.sampling.max_new_tokens, chat.max_seq);
  }

  const KernelRewardPolicy reward(c.reward);
  k.parts.environments = kernel_env_pools(k.evaluator, reward, c.env);
  k.parts.tasks = k.train_tasks.tasks;
  k.parts.options = c;
  k.parts.stages = {std::make_shared<EvaluatorHealthStage>(), std::make_shared<KernelMetricsStage>(c.eval.fast_p),
                    std::make_shared<MeaningfulTurnMaskStage>(c.rejection.mask_void_turns),
                    std::make_shared<GroupFilterStage>(c.rejection.groups), std::make_shared<PrsStage>(c.rejection.prs)};
  k.parts.decode_payload = kernel_verdict_decoder(reward);
  k.parts.resolved_config = config_to_yaml(c);
  if (!k.train_tasks.tasks.empty())
    k.parts.startup_check = [evaluator = k.evaluator, task = k.train_tasks.tasks.front().id] {
      probe_evaluator(*evaluator, task);
    };
  return k;
}

KernelTrainer::KernelTrainer(TrainConfig config, std::shared_ptr<KernelEvaluator> evaluator,
                             std::shared_ptr<Communicator> comm)
    : KernelTrainer(kernel_recipe(std::move(config), std::move(evaluator), comm.get()), comm) {}

// The base is built from a copy of the parts before recipe_ takes the rest.
KernelTrainer::KernelTrainer(KernelRecipe recipe, std::shared_ptr<Communicator> comm)
    : Trainer(recipe.parts, std::move(comm)), recipe_(std::move(recipe)) {}

const PlanActionSpace& KernelTrainer::action_space() const {
  if (!recipe_.plan_space)
    fail("KernelTrainer::action_space: env.action is '{}'; the plan action space exists only for plan",
         to_string(recipe_.config.env.action));
  return *recipe_.plan_space;
}

}  // namespace turnrl
