#include "turnrl/trainer/trainer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <torch/cuda.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include "turnrl/algo/advantage.h"
#include "turnrl/algo/policy_loss.h"
#include "turnrl/algo/returns.h"
#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"
#include "turnrl/env/kernel_env.h"
#include "turnrl/env/kernel_plan.h"
#include "turnrl/eval/cpu_backend.h"
#include "turnrl/eval/cpu_protocol.h"
#include "turnrl/eval/cpu_tasks.h"
#include "turnrl/eval/eval_codec.h"
#include "turnrl/eval/evaluator_health.h"
#include "turnrl/reward/rejection.h"
#include "turnrl/trainer/checkpoint.h"
#include "turnrl/trainer/distributed.h"
#include "turnrl/trainer/progress.h"
#include "turnrl/trainer/stop_request.h"

namespace turnrl {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Stages that draw random numbers, for stage_seed.
enum Stage : uint64_t { kTaskOrder = 1, kRollout = 2, kPrs = 3, kGroupFilter = 4, kEpochOrder = 5 };

void merge(Metrics& into, const Metrics& from) {
  for (const auto& [k, v] : from) into[k] = v;
}

// A tensor's elements as bytes (host, contiguous); the receiver knows dtype and width.
std::string tensor_bytes(const torch::Tensor& t) {
  const torch::Tensor h = t.cpu().contiguous();
  return std::string(static_cast<const char*>(h.data_ptr()), size_t(h.numel()) * h.element_size());
}

torch::Tensor tensor_from_bytes(const std::string& bytes, torch::ScalarType dtype, int64_t width) {
  const int64_t item = int64_t(c10::elementSize(dtype));
  const int64_t row = width > 0 ? width : 1;
  if (int64_t(bytes.size()) % (item * row) != 0) fail("distributed: {} bytes are not whole rows of {} x {} bytes", bytes.size(), row, item);
  const int64_t rows = int64_t(bytes.size()) / (item * row);
  torch::Tensor t = width > 0 ? torch::empty({rows, width}, dtype) : torch::empty({rows}, dtype);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// Sums metric maps over ranks (rank order, the same on every rank).
Metrics sum_over_ranks(Communicator& comm, const Metrics& mine) {
  cpu_detail::Writer w;
  for (const auto& [k, v] : mine) w.str(k), w.pod(v);
  Metrics total;
  for (const std::string& part : comm.all_gather(w.data()))
    for (cpu_detail::Reader r(part); !r.at_end();) {
      const std::string key = r.str();
      total[key] += r.pod<double>();
    }
  return total;
}

// This rank's contiguous share [first, end) of `count` items.
std::pair<int64_t, int64_t> shard_of(int64_t count, int rank, int world) {
  return {count * rank / world, count * (rank + 1) / world};
}

}  // namespace

uint64_t stage_seed(uint64_t seed, int64_t step, uint64_t stage) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(step) + 1) * 0xBF58476D1CE4E5B9ull ^ stage * 0x94D049BB133111EBull;
  return splitmix64(state);
}

SamplingOptions rollout_sampling(const TrainConfig& c) {
  return SamplingOptions().temp(c.sampling.temperature).topk(c.sampling.top_k).topp(c.sampling.top_p);
}

std::shared_ptr<KernelEvaluator> make_evaluator(const TrainConfig& c) { return make_evaluator(c.evaluator); }

std::pair<TaskSet, TaskSet> load_task_sets(const TrainConfig& c) {
  const TaskSet all = c.tasks.source == "file" ? load_tasks_jsonl(c.tasks.file) : builtin_tasks(c.evaluator.backend);
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

double scheduled_lr(const OptimizerConfig& o, int64_t step, int64_t total) {
  if (o.warmup_steps > 0 && step < o.warmup_steps) return o.lr * double(step + 1) / double(o.warmup_steps);
  if (o.schedule == "constant") return o.lr;
  const int64_t span = std::max<int64_t>(1, total - o.warmup_steps);
  const double progress = std::min(1.0, double(step - o.warmup_steps) / double(span));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine);
}

RolloutBatch select_rollout_rows(const RolloutBatch& r, const torch::Tensor& keep) {
  RolloutBatch out = r;
  out.batch = select_rows(r.batch, keep);
  const torch::Tensor host = keep.to(torch::kCPU, torch::kBool).contiguous();
  const bool* k = host.data_ptr<bool>();
  out.evals.clear();
  out.observations.clear();
  out.actions.clear();
  for (int64_t i = 0; i < host.size(0); ++i)
    if (k[i]) {
      out.evals.push_back(r.evals[size_t(i)]);
      out.observations.push_back(r.observations[size_t(i)]);
      out.actions.push_back(r.actions[size_t(i)]);
    }
  return out;
}

Metrics rollout_metrics(const RolloutBatch& r, const std::vector<double>& fast_p) {
  Metrics m;
  const int64_t rows = r.batch.size();
  m["rollout/turns"] = double(rows);
  m["rollout/episodes"] = double(r.episodes);
  m["rollout/mean_turns"] = r.episodes ? double(rows) / double(r.episodes) : 0.0;
  if (rows == 0) return m;
  const torch::Tensor reward = r.batch.reward.to(torch::kCPU, torch::kDouble).contiguous();
  const torch::Tensor traj = r.batch.traj.to(torch::kCPU).contiguous();
  const double* rw = reward.data_ptr<double>();
  const int64_t* tj = traj.data_ptr<int64_t>();
  std::map<int64_t, double> best_speedup, best_reward, last_reward;
  std::map<int64_t, bool> any_correct;
  double reward_sum = 0, speedup_sum = 0, coverage_sum = 0;
  int64_t correct = 0;
  std::map<RewardOutcome, int64_t> outcomes;
  for (int64_t i = 0; i < rows; ++i) {
    const EvalResult& e = r.evals[size_t(i)];
    const RewardOutcome o = classify(e);
    ++outcomes[o];
    reward_sum += rw[i];
    const bool ok = o == RewardOutcome::correct;
    if (!best_reward.count(tj[i])) best_reward[tj[i]] = rw[i], best_speedup[tj[i]] = 0, any_correct[tj[i]] = false;
    best_reward[tj[i]] = std::max(best_reward[tj[i]], rw[i]);
    last_reward[tj[i]] = rw[i];  // rows are ordered by (traj, turn)
    if (ok) {
      ++correct;
      speedup_sum += e.speedup;
      coverage_sum += e.coverage;
      best_speedup[tj[i]] = std::max(best_speedup[tj[i]], e.speedup);
      any_correct[tj[i]] = true;
    }
  }
  auto mean_of = [](const std::map<int64_t, double>& v) {
    double s = 0;
    for (const auto& kv : v) s += kv.second;
    return v.empty() ? 0.0 : s / double(v.size());
  };
  m["reward/mean"] = reward_sum / double(rows);
  m["reward/best_mean"] = mean_of(best_reward);
  m["reward/last_turn_mean"] = mean_of(last_reward);
  m["kernel/correct"] = double(correct) / double(rows);
  m["kernel/speedup"] = correct ? speedup_sum / double(correct) : 0.0;
  m["kernel/coverage"] = correct ? coverage_sum / double(correct) : 0.0;
  for (RewardOutcome o : {RewardOutcome::format, RewardOutcome::compile, RewardOutcome::runtime, RewardOutcome::incorrect,
                          RewardOutcome::hacking})
    m[std::string("kernel/") + to_string(o)] = double(outcomes[o]);
  int64_t solved = 0;
  for (const auto& kv : any_correct) solved += kv.second;
  m["kernel/episode_correct"] = double(solved) / double(any_correct.size());
  std::vector<double> best;
  for (const auto& kv : best_speedup) best.push_back(kv.second);
  for (double p : fast_p) m[fmt::format("kernel/fast@{}", p)] = fast_at_p(best, p);
  return m;
}

// ---------------------------------------------------------------------------------------------

struct Trainer::State {
  TrainConfig config;
  TaskSet train_tasks, validation_tasks;
  std::shared_ptr<KernelEvaluator> evaluator;
  KernelRewardPolicy reward;
  std::unique_ptr<PlanActionSpace> space;
  std::unique_ptr<TransformerPolicy> policy;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  torch::Device device = torch::kCPU;
  int64_t step = 0;
  int64_t optimizer_steps = 0;
  RolloutBatch last_rollouts;
  std::shared_ptr<Communicator> comm;        // null in the one-process world
  std::unique_ptr<GradientBuckets> buckets;  // with comm
  int rank = 0, world = 1;

  LogitsFn logits() {
    TransformerPolicy* p = policy.get();
    return [p](const torch::Tensor& t, const torch::Tensor& m) { return p->model()->forward(t, m); };
  }
  std::string checkpoint_root() const { return (fs::path(config.run.dir) / "checkpoints").string(); }
};

Trainer::Trainer(TrainConfig config, std::shared_ptr<KernelEvaluator> evaluator, std::shared_ptr<Communicator> comm)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.config = std::move(config);
  const TrainConfig& c = s.config;
  s.evaluator = evaluator ? std::move(evaluator) : make_evaluator(c);
  if (c.env.action != ActionFormat::plan)
    fail("env.action: '{}' is not supported by the built-in Trainer (its policy writes kernel plans); allowed: plan",
         to_string(c.env.action));
  if (c.rejection.groups.target_groups != 0)
    fail("rejection.group_filter.target_groups: {} is not supported by the built-in Trainer (it trains on every "
         "surviving group each step; use GroupCarryOver in a custom loop); allowed: 0",
         c.rejection.groups.target_groups);
  if (c.policy_loss.kl_loss_coef != 0)
    fail("policy_loss.kl_loss_coef: {} needs a reference policy, which the built-in Trainer does not keep; allowed: 0",
         c.policy_loss.kl_loss_coef);
  if (c.model.device == "cuda" && !torch::cuda::is_available())
    fail("model.device: 'cuda' but LibTorch sees no CUDA device; allowed here: cpu");
  s.device = c.model.device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const DistributedEnv env = comm ? DistributedEnv{comm->rank(), comm->world_size(), comm->rank()}
                                  : distributed_env_from_environment();
  // One process per GPU: rank r trains on GPU LOCAL_RANK (mod the visible count).
  if (env.world_size > 1 && s.device.is_cuda())
    s.device = torch::Device(torch::kCUDA, c10::DeviceIndex(env.local_rank % int(torch::cuda::device_count())));
  if (comm)
    s.comm = std::move(comm);
  else if (env.world_size > 1)
    s.comm = make_communicator(env, s.device, CommunicatorOptions{c.distributed.backend, c.distributed.timeout_seconds});
  if (s.comm) s.rank = s.comm->rank(), s.world = s.comm->world_size();
  if (c.trainer.threads > 0) torch::set_num_threads(int(c.trainer.threads));

  std::tie(s.train_tasks, s.validation_tasks) = load_task_sets(c);
  for (const TaskSet* set : {&s.train_tasks, &s.validation_tasks})
    for (const Task& t : set->tasks) {
      const std::vector<std::string> planned = plan_task_names(t.backend);
      if (std::find(planned.begin(), planned.end(), t.id) == planned.end())
        fail("tasks.include: task '{}' (backend {}) has no kernel-plan template; allowed: {}", t.id, t.backend,
             fmt::join(planned, ", "));
    }
  TaskSet all = s.train_tasks;
  all.tasks.insert(all.tasks.end(), s.validation_tasks.tasks.begin(), s.validation_tasks.tasks.end());
  s.space = std::make_unique<PlanActionSpace>(all, c.env.max_turns);
  if (c.model.max_seq < s.space->sequence_length())
    fail("model.max_seq: {} is shorter than a plan turn ({} tokens); allowed: >= {}", c.model.max_seq,
         s.space->sequence_length(), s.space->sequence_length());

  s.reward = KernelRewardPolicy(c.reward);

  torch::manual_seed(uint64_t(c.trainer.seed));
  TransformerOptions mo;
  mo.vocab(s.space->vocab_size()).d_model(c.model.d_model).layers(c.model.layers).heads(c.model.heads).ffn(c.model.ffn)
      .max_seq(c.model.max_seq);
  validate(mo);
  s.policy = std::make_unique<TransformerPolicy>(mo, s.device);
  if (!c.model.init.empty()) s.policy->load(c.model.init);
  s.optimizer = std::make_unique<torch::optim::AdamW>(
      s.policy->parameters(), torch::optim::AdamWOptions(c.optimizer.lr)
                                  .betas(std::make_tuple(c.optimizer.beta1, c.optimizer.beta2))
                                  .eps(c.optimizer.eps)
                                  .weight_decay(c.optimizer.weight_decay));
  if (s.world > 1) {
    s.buckets = std::make_unique<GradientBuckets>(s.policy->parameters(), int64_t(c.distributed.bucket_mb * double(1 << 20)));
    check_ranks_agree();
  }
}

// Every rank must train the same model on the same config, or the gradient sums are meaningless:
// the resolved config and the initial parameters are compared once, at construction.
void Trainer::check_ranks_agree() {
  State& s = *s_;
  double checksum = 0;
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : s.policy->parameters()) checksum += p.to(torch::kCPU, torch::kDouble).sum().item<double>();
  }
  const std::vector<std::string> seen = s.comm->all_gather(fmt::format("{:a}\n{}", checksum, config_to_yaml(s.config)));
  for (int r = 1; r < s.world; ++r)
    if (seen[size_t(r)] != seen[0])
      fail("distributed: rank {} has a different config or initial model than rank 0 (every rank must load the same "
           "config, overrides and model.init)",
           r);
}

Trainer::~Trainer() = default;

int64_t Trainer::step() const { return s_->step; }
int64_t Trainer::optimizer_steps() const { return s_->optimizer_steps; }
TransformerPolicy& Trainer::policy() { return *s_->policy; }
const PlanActionSpace& Trainer::action_space() const { return *s_->space; }
const TrainConfig& Trainer::config() const { return s_->config; }
const TaskSet& Trainer::train_tasks() const { return s_->train_tasks; }
const TaskSet& Trainer::validation_tasks() const { return s_->validation_tasks; }
KernelEvaluator& Trainer::evaluator() { return *s_->evaluator; }
const RolloutBatch& Trainer::last_rollouts() const { return s_->last_rollouts; }
int Trainer::rank() const { return s_->rank; }
int Trainer::world_size() const { return s_->world; }

std::vector<Task> Trainer::step_tasks(int64_t step) const {
  const auto& tasks = s_->train_tasks.tasks;
  const int64_t count = int64_t(tasks.size()), per_step = s_->config.trainer.tasks_per_step;
  std::vector<Task> out;
  std::vector<size_t> order;
  int64_t order_pass = -1;
  for (int64_t j = 0; j < per_step; ++j) {
    const int64_t flat = step * per_step + j, pass = flat / count;
    if (pass != order_pass) {
      order.resize(tasks.size());
      std::iota(order.begin(), order.end(), size_t(0));
      uint64_t state = stage_seed(uint64_t(s_->config.trainer.seed), pass, kTaskOrder);
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[splitmix64(state) % i]);
      order_pass = pass;
    }
    out.push_back(tasks[order[size_t(flat % count)]]);
  }
  return out;
}

RolloutBatch Trainer::collect_rollouts(const std::vector<Task>& tasks, int64_t samples_per_task,
                                       const SamplingOptions& sampling, uint64_t seed) {
  return collect_rollout_shard(tasks, samples_per_task, 0, int64_t(tasks.size()) * samples_per_task, sampling, seed);
}

RolloutBatch Trainer::collect_rollout_shard(const std::vector<Task>& tasks, int64_t samples_per_task,
                                            int64_t first_episode, int64_t end_episode, const SamplingOptions& sampling,
                                            uint64_t seed) {
  State& s = *s_;
  const PlanActionSpace& space = *s.space;
  const int64_t all_episodes = int64_t(tasks.size()) * samples_per_task;
  if (samples_per_task < 1 || first_episode < 0 || first_episode > end_episode || end_episode > all_episodes)
    fail("collect_rollout_shard: episodes [{}, {}) are not inside the {} x {} episodes of the step", first_episode,
         end_episode, tasks.size(), samples_per_task);
  const int64_t episodes = end_episode - first_episode;
  // Indexed by e - first_episode.
  std::vector<std::unique_ptr<KernelEnv>> envs;
  std::vector<Observation> obs;
  for (int64_t e = first_episode; e < end_episode; ++e) {
    envs.push_back(std::make_unique<KernelEnv>(s.evaluator, s.reward, s.config.env));
    obs.push_back(envs.back()->reset(tasks[size_t(e / samples_per_task)]));
  }
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  RolloutBatch r;
  r.episodes = episodes;
  for (const Task& t : tasks) r.task_ids.push_back(t.id), r.task_levels.push_back(t.level);
  std::vector<int64_t> group, traj, turn;
  std::vector<torch::Tensor> tokens, rmask, logp;
  std::vector<int64_t> live(static_cast<size_t>(episodes));
  std::iota(live.begin(), live.end(), first_episode);
  s.policy->eval();
  for (int t = 0; !live.empty(); ++t) {
    std::vector<TokenIds> prompts;
    for (int64_t e : live) prompts.push_back(space.prompt(obs[size_t(e - first_episode)].compact));
    torch::Tensor prompt_tensor = torch::empty({int64_t(live.size()), space.prompt_length()}, torch::kLong);
    for (size_t i = 0; i < prompts.size(); ++i)
      std::copy(prompts[i].begin(), prompts[i].end(), prompt_tensor[int64_t(i)].data_ptr<int64_t>());
    const auto t0 = Clock::now();
    const PlanSample sample = sample_plans(s.logits(), space, prompt_tensor.to(s.device), sampling, generator);
    r.generate_seconds += seconds_since(t0);
    std::vector<Environment*> stepping;
    std::vector<Action> actions;
    for (size_t i = 0; i < live.size(); ++i) {
      stepping.push_back(envs[size_t(live[i] - first_episode)].get());
      actions.push_back({sample.plans[i]});
    }
    const auto t1 = Clock::now();
    std::vector<StepResult> results = step_batch(stepping, actions);
    r.eval_seconds += seconds_since(t1);
    tokens.push_back(sample.tokens.cpu());
    rmask.push_back(sample.response_mask.cpu());
    logp.push_back(sample.logp.cpu());
    std::vector<int64_t> next;
    for (size_t i = 0; i < live.size(); ++i) {
      const int64_t e = live[i];
      group.push_back(e / samples_per_task);
      traj.push_back(e);
      turn.push_back(t);
      r.evals.push_back(results[i].eval.value_or(EvalResult{}));
      r.observations.push_back(obs[size_t(e - first_episode)].compact);
      r.actions.push_back(sample.plans[i]);
      obs[size_t(e - first_episode)] = results[i].observation;
      if (!results[i].done) next.push_back(e);
    }
    live = std::move(next);
  }
  s.policy->train();
  // Rows in (trajectory, turn) order.
  std::vector<int64_t> order(group.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return traj[size_t(a)] < traj[size_t(b)]; });
  auto permute = [&](const std::vector<int64_t>& v) {
    std::vector<int64_t> out;
    for (int64_t i : order) out.push_back(v[size_t(i)]);
    return torch::tensor(out, torch::kLong);
  };
  auto permute_strings = [&](std::vector<std::string>& v) {
    std::vector<std::string> out;
    for (int64_t i : order) out.push_back(std::move(v[size_t(i)]));
    v = std::move(out);
  };
  std::vector<EvalResult> evals;
  for (int64_t i : order) evals.push_back(std::move(r.evals[size_t(i)]));
  r.evals = std::move(evals);
  permute_strings(r.observations);
  permute_strings(r.actions);
  const torch::Tensor index = torch::tensor(order, torch::kLong);
  TurnBatch& b = r.batch;
  b.group = permute(group).to(s.device);
  b.traj = permute(traj).to(s.device);
  b.turn = permute(turn).to(s.device);
  b.reward = torch::zeros({int64_t(order.size())}, torch::dtype(torch::kFloat).device(s.device));
  b.turn_mask = torch::ones({int64_t(order.size())}, torch::dtype(torch::kBool).device(s.device));
  if (tokens.empty()) {  // an empty shard (more ranks than episodes)
    const int64_t width = space.sequence_length();
    tokens.push_back(torch::zeros({0, width}, torch::kLong));
    rmask.push_back(torch::zeros({0, width}, torch::kBool));
    logp.push_back(torch::zeros({0, width}, torch::kFloat));
  }
  b.tokens = torch::cat(tokens).index_select(0, index).to(s.device);
  b.response_mask = torch::cat(rmask).index_select(0, index).to(s.device);
  b.rollout_logp = torch::cat(logp).index_select(0, index).to(s.device);
  finalize(b);
  return r;
}

RolloutBatch Trainer::gather_rollouts(const RolloutBatch& shard) {
  State& s = *s_;
  if (s.world == 1) return shard;
  const TurnBatch& b = shard.batch;
  const int64_t width = s.space->sequence_length();
  // Length-prefixed fields in the CPU evaluator's wire encoding.
  cpu_detail::Writer w;
  for (const torch::Tensor* t : {&b.group, &b.traj, &b.turn, &b.tokens, &b.response_mask, &b.rollout_logp})
    w.str(tensor_bytes(*t));
  for (size_t i = 0; i < shard.evals.size(); ++i)
    w.str(encode_result(shard.evals[i])), w.str(shard.observations[i]), w.str(shard.actions[i]);
  w.pod(shard.episodes), w.pod(shard.generate_seconds), w.pod(shard.eval_seconds);
  const std::vector<std::string> parts = s.comm->all_gather(w.data());
  RolloutBatch r;
  r.task_ids = shard.task_ids;
  r.task_levels = shard.task_levels;
  std::vector<torch::Tensor> group, traj, turn, tokens, rmask, logp;
  for (const std::string& part : parts) {
    cpu_detail::Reader in(part);
    group.push_back(tensor_from_bytes(in.str(), torch::kLong, 0));
    traj.push_back(tensor_from_bytes(in.str(), torch::kLong, 0));
    turn.push_back(tensor_from_bytes(in.str(), torch::kLong, 0));
    tokens.push_back(tensor_from_bytes(in.str(), torch::kLong, width));
    rmask.push_back(tensor_from_bytes(in.str(), torch::kBool, width));
    logp.push_back(tensor_from_bytes(in.str(), torch::kFloat, width));
    for (int64_t i = 0; i < group.back().size(0); ++i) {
      r.evals.push_back(decode_result(in.str()));
      r.observations.push_back(in.str());
      r.actions.push_back(in.str());
    }
    // Episodes add up; the step waited for the slowest rank.
    r.episodes += in.pod<int64_t>();
    r.generate_seconds = std::max(r.generate_seconds, in.pod<double>());
    r.eval_seconds = std::max(r.eval_seconds, in.pod<double>());
    if (!in.at_end()) fail("distributed: unread bytes after a rank's rollout shard");
  }
  // Rank r's shard holds episodes before rank r+1's, each in (traj, turn) order: so does the whole.
  TurnBatch& g = r.batch;
  g.group = torch::cat(group).to(s.device);
  g.traj = torch::cat(traj).to(s.device);
  g.turn = torch::cat(turn).to(s.device);
  g.tokens = torch::cat(tokens).to(s.device);
  g.response_mask = torch::cat(rmask).to(s.device);
  g.rollout_logp = torch::cat(logp).to(s.device);
  g.reward = torch::zeros({g.group.size(0)}, torch::dtype(torch::kFloat).device(s.device));
  g.turn_mask = torch::ones({g.group.size(0)}, torch::dtype(torch::kBool).device(s.device));
  finalize(g);
  return r;
}

void Trainer::score(RolloutBatch& r) const {
  const std::vector<double> rewards = s_->reward.rewards(r.evals);
  r.batch.reward = torch::tensor(rewards, torch::kDouble).to(torch::kFloat).to(s_->device);
}

Metrics Trainer::mask_void_turns(RolloutBatch& r) const {
  if (!s_->config.rejection.mask_void_turns) return {{"filter/void_turns", 0.0}};
  const TurnMaskReport report = apply_meaningful_turn_mask(r.batch);
  return {{"filter/void_turns", double(report.masked)}};
}

Metrics Trainer::filter_groups(RolloutBatch& r) const {
  at::Generator generator =
      at::make_generator<at::CPUGeneratorImpl>(stage_seed(s_->config.rejection.groups.seed, s_->step, kGroupFilter));
  const GroupFilterReport report = ::turnrl::filter_groups(r.batch, s_->config.rejection.groups, generator);
  Metrics m = {{"filter/groups_kept", double(report.kept.size())},
               {"filter/groups_low_std", double(report.low_std.size())},
               {"filter/groups_all_equal", double(report.all_equal.size())},
               {"filter/groups_too_small", double(report.too_small.size())}};
  if (int64_t(report.kept.size()) != int64_t(r.task_ids.size())) r = select_rollout_rows(r, report.keep_rows);
  return m;
}

void Trainer::recompute_old_logp(TurnBatch& batch) {
  State& s = *s_;
  torch::NoGradGuard no_grad;
  const int64_t micro = s.config.trainer.micro_batch_size;
  // Data parallel: each rank its contiguous share of the rows, then all-gathered.
  const auto [first, end] = shard_of(batch.size(), s.rank, s.world);
  std::vector<torch::Tensor> parts;
  for (int64_t start = first; start < end; start += micro) {
    const int64_t len = std::min(micro, end - start);
    const torch::Tensor tokens = batch.tokens.narrow(0, start, len);
    const torch::Tensor logits = s.policy->model()->forward(tokens, plan_attention_mask(tokens));
    parts.push_back(plan_token_logp(logits, tokens, batch.response_mask.narrow(0, start, len), *s.space).logp);
  }
  torch::Tensor mine = parts.empty() ? torch::zeros({0, batch.rollout_logp.size(1)}, batch.rollout_logp.options())
                                     : torch::cat(parts);
  if (s.world > 1) {
    std::vector<torch::Tensor> all;
    for (const std::string& part : s.comm->all_gather(tensor_bytes(mine.to(torch::kFloat))))
      all.push_back(tensor_from_bytes(part, torch::kFloat, batch.rollout_logp.size(1)));
    mine = torch::cat(all).to(batch.rollout_logp.device());
  }
  batch.old_logp = mine;
}

MismatchResult Trainer::correct_mismatch(TurnBatch& batch) const {
  MismatchResult result = compute_mismatch(batch, s_->config.mismatch);
  batch.response_mask = result.response_mask;
  return result;
}

Metrics Trainer::reject_by_profile(RolloutBatch& r, uint64_t seed) const {
  const PrsOptions& o = s_->config.rejection.prs;
  const PrsReport report = apply_prs(r.batch, prs_inputs(r.evals, o.coverage_source), o, seed);
  return {{"prs/subject", double(report.subject)},
          {"prs/dropped", double(report.dropped)},
          {"prs/drop_rate", report.subject ? double(report.dropped) / double(report.subject) : 0.0}};
}

torch::Tensor Trainer::advantages(const TurnBatch& batch, torch::Tensor* returns_out) const {
  const torch::Tensor returns = compute_returns(batch, s_->config.returns);
  if (returns_out) *returns_out = returns;
  return advantage_estimator(s_->config.estimator)(batch, returns, s_->config.advantage);
}

Metrics Trainer::update(const TurnBatch& batch, const torch::Tensor& advantages, const torch::Tensor& weights,
                        uint64_t seed) {
  State& s = *s_;
  const TrainConfig& c = s.config;
  const torch::Tensor rows = batch.response_mask.any(1).nonzero().squeeze(1);
  const int64_t n = rows.size(0);
  Metrics m = {{"actor/rows", double(n)}};
  if (n == 0) {
    m["update/skipped"] = 1;
    return m;
  }
  const torch::Tensor tokens = batch.tokens.index_select(0, rows), mask = batch.response_mask.index_select(0, rows),
                      old_logp = batch.old_logp.index_select(0, rows), adv = advantages.index_select(0, rows);
  const torch::Tensor w = weights.defined() ? weights.index_select(0, rows) : torch::Tensor();
  const bool need_entropy = c.policy_loss.entropy_coef != 0;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<torch::Tensor> params = s.policy->parameters();
  const double share_per_epoch = 1.0 / double(c.trainer.ppo_epochs);
  Metrics sums;
  double loss_sum = 0, grad_norm_sum = 0;
  for (int64_t epoch = 0; epoch < c.trainer.ppo_epochs; ++epoch) {
    const torch::Tensor order =
        c.trainer.ppo_epochs == 1 ? torch::arange(n) : torch::randperm(n, generator, torch::kLong);
    s.optimizer->zero_grad();
    int64_t micro_index = 0;
    for (int64_t start = 0; start < n; start += c.trainer.micro_batch_size, ++micro_index) {
      // Data parallel: micro-batches dealt round-robin; every share is of the whole batch's rows,
      // so the ranks' gradients add up to the one-process gradient.
      if (micro_index % s.world != s.rank) continue;
      const int64_t len = std::min(c.trainer.micro_batch_size, n - start);
      const torch::Tensor sel = order.narrow(0, start, len).to(tokens.device());
      const torch::Tensor t = tokens.index_select(0, sel);
      const torch::Tensor logits = s.policy->model()->forward(t, plan_attention_mask(t));
      const TokenLogp tl = plan_token_logp(logits, t, mask.index_select(0, sel), *s.space);
      PolicyLossInputs in;
      in.logp = tl.logp;
      in.old_logp = old_logp.index_select(0, sel);
      in.advantages = adv.index_select(0, sel);
      in.response_mask = mask.index_select(0, sel);
      if (w.defined()) in.weights = w.index_select(0, sel);
      if (need_entropy) in.entropy = tl.entropy;
      const PolicyLossResult res = policy_loss(in, c.policy_loss);
      const double share = double(len) / double(n);
      (res.loss * share).backward();
      loss_sum += res.loss.item<double>() * share * share_per_epoch;
      for (const auto& [k, v] : res.metrics.to_map()) sums[k] += v * share * share_per_epoch;
    }
    if (s.world > 1) s.buckets->all_reduce_sum(*s.comm);
    const double max_norm = c.optimizer.grad_clip > 0 ? c.optimizer.grad_clip : std::numeric_limits<double>::infinity();
    grad_norm_sum += torch::nn::utils::clip_grad_norm_(params, max_norm) * share_per_epoch;
    const double lr = scheduled_lr(c.optimizer, s.optimizer_steps, c.trainer.steps * c.trainer.ppo_epochs);
    for (auto& group : s.optimizer->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    s.optimizer->step();
    ++s.optimizer_steps;
    m["optim/lr"] = lr;
  }
  if (s.world > 1) {
    sums["actor/loss"] = loss_sum;
    sums = sum_over_ranks(*s.comm, sums);
    loss_sum = sums["actor/loss"];
  }
  merge(m, sums);
  m["actor/loss"] = loss_sum;
  m["optim/grad_norm"] = grad_norm_sum;
  return m;
}

Metrics Trainer::learn(RolloutBatch& r) {
  State& s = *s_;
  const TrainConfig& c = s.config;
  Metrics m;
  score(r);
  s.last_rollouts = r;
  merge(m, rollout_metrics(r, c.eval.fast_p));
  merge(m, mask_void_turns(r));
  merge(m, filter_groups(r));
  if (r.batch.size() > 0) {
    // Bypass trusts the rollout engine's log-probs as the proximal policy (verl's bypass_mode):
    // one forward pass fewer per step, and the mismatch weights are 1 by construction.
    if (c.mismatch.bypass)
      r.batch.old_logp = r.batch.rollout_logp;
    else
      recompute_old_logp(r.batch);
    const MismatchResult mismatch = correct_mismatch(r.batch);
    merge(m, mismatch.diagnostics.to_map());
    merge(m, reject_by_profile(r, stage_seed(uint64_t(c.trainer.seed), s.step, kPrs)));
    torch::Tensor returns;
    const torch::Tensor adv = advantages(r.batch, &returns);
    const torch::Tensor valid = r.batch.turn_mask_or_all();
    m["adv/abs_mean"] = adv.abs().masked_select(valid).mean().item<double>();
    m["returns/mean"] = returns.masked_select(valid).mean().item<double>();
    merge(m, update(r.batch, adv, mismatch.weights, stage_seed(uint64_t(c.trainer.seed), s.step, kEpochOrder)));
  } else {
    m["update/skipped"] = 1;
  }
  return m;
}

Metrics Trainer::train_step() {
  State& s = *s_;
  const TrainConfig& c = s.config;
  const auto t0 = Clock::now();
  Metrics m = {{"step", double(s.step + 1)}};
  const std::vector<Task> tasks = step_tasks(s.step);
  const auto [first, end] = shard_of(int64_t(tasks.size()) * c.trainer.samples_per_task, s.rank, s.world);
  // Rank 0 draws what the one-process trainer draws; other ranks their own streams.
  uint64_t seed = stage_seed(uint64_t(c.trainer.seed), s.step, kRollout);
  if (s.rank > 0) seed = stage_seed(seed, s.rank, kRollout);
  const RolloutBatch shard = collect_rollout_shard(tasks, c.trainer.samples_per_task, first, end, rollout_sampling(c), seed);
  const auto t_gather = Clock::now();
  RolloutBatch r = gather_rollouts(shard);
  require_evaluator_worked(r.evals, fmt::format("step {}", s.step + 1));
  if (s.world > 1) {
    m["time/gather_s"] = seconds_since(t_gather);
    m["dist/world_size"] = double(s.world);
  }
  m["time/generate_s"] = r.generate_seconds;
  m["time/eval_s"] = r.eval_seconds;
  m["perf/evaluations"] = double(r.batch.size());
  const auto t1 = Clock::now();
  merge(m, learn(r));
  m["time/update_s"] = seconds_since(t1);
  const double step_seconds = seconds_since(t0);
  m["time/step_s"] = step_seconds;
  m["perf/rollouts_per_s"] = double(r.episodes) / step_seconds;
  m["perf/evals_per_s"] = m["perf/evaluations"] / step_seconds;
  ++s.step;
  return m;
}

// --- checkpoints -------------------------------------------------------------------------------

std::string Trainer::save_checkpoint() {
  State& s = *s_;
  if (s.rank != 0) return "";  // every rank holds the same state; rank 0 writes it
  return write_checkpoint(
      s.checkpoint_root(), s.step,
      [&](const std::string& dir) {
        save_checkpoint_file(dir + "/policy.pt", [&](const std::string& path) { s.policy->save(path); });
        save_checkpoint_file(dir + "/optimizer.pt", [&](const std::string& path) { torch::save(*s.optimizer, path); });
        torch::serialize::OutputArchive state;
        state.write("step", torch::tensor(s.step, torch::kLong));
        state.write("optimizer_steps", torch::tensor(s.optimizer_steps, torch::kLong));
        state.write("seed", torch::tensor(s.config.trainer.seed, torch::kLong));
        state.write("torch_rng", at::detail::getDefaultCPUGenerator().get_state());
        save_checkpoint_file(dir + "/trainer_state.pt", [&](const std::string& path) { state.save_to(path); });
        write_file(dir + "/config.yaml", config_to_yaml(s.config));
      },
      s.config.checkpoint.keep_last);
}

void Trainer::load_policy(const std::string& path) {
  const std::string file = fs::is_directory(path) ? (fs::path(path) / "policy.pt").string() : path;
  if (!fs::exists(file)) fail("checkpoint: no policy file '{}'", file);
  s_->policy->load(file);
}

void Trainer::load_checkpoint(const std::string& dir) {
  State& s = *s_;
  for (const char* name : {"policy.pt", "optimizer.pt", "trainer_state.pt"})
    if (!fs::exists(fs::path(dir) / name)) fail("checkpoint '{}': missing {}", dir, name);
  load_policy(dir);
  torch::load(*s.optimizer, dir + "/optimizer.pt");
  torch::serialize::InputArchive state;
  state.load_from(dir + "/trainer_state.pt");
  torch::Tensor step, optimizer_steps, seed, rng;
  state.read("step", step);
  state.read("optimizer_steps", optimizer_steps);
  state.read("seed", seed);
  state.read("torch_rng", rng);
  if (seed.item<int64_t>() != s.config.trainer.seed)
    fail("checkpoint '{}': written with trainer.seed {}, the config says {}; resume with the same seed", dir,
         seed.item<int64_t>(), s.config.trainer.seed);
  s.step = step.item<int64_t>();
  s.optimizer_steps = optimizer_steps.item<int64_t>();
  at::Generator global = at::detail::getDefaultCPUGenerator();  // a handle to the global generator
  global.set_state(rng);
}

bool Trainer::resume() {
  const std::string root = s_->checkpoint_root();
  if (s_->rank == 0) remove_incomplete_checkpoints(root);
  if (s_->comm) s_->comm->barrier();  // the other ranks look after rank 0 tidied up
  std::vector<SkippedCheckpoint> skipped;
  const auto loaded = load_newest_valid_checkpoint(root, [&](const std::string& dir) { load_checkpoint(dir); }, &skipped);
  if (s_->rank == 0)
    for (const auto& bad : skipped)
      fmt::print(stderr, "turnrl: checkpoint '{}' cannot be loaded ({}); resuming from the older '{}' instead\n",
                 bad.entry.path, bad.reason, loaded->path);
  return loaded.has_value();
}

// --- the loop ------------------------------------------------------------------------------------

namespace {

std::string sample_lines(const RolloutBatch& r, int64_t step, int64_t max_episodes) {
  std::string out;
  const torch::Tensor traj = r.batch.traj.cpu().contiguous(), group = r.batch.group.cpu().contiguous();
  const torch::Tensor reward = r.batch.reward.to(torch::kCPU, torch::kDouble).contiguous();
  const int64_t rows = r.batch.size();
  int64_t episodes = 0;
  for (int64_t i = 0; i < rows && episodes < max_episodes;) {
    const int64_t e = traj.data_ptr<int64_t>()[i], g = group.data_ptr<int64_t>()[i];
    std::string turns;
    for (; i < rows && traj.data_ptr<int64_t>()[i] == e; ++i) {
      const EvalResult& ev = r.evals[size_t(i)];
      if (!turns.empty()) turns += ", ";
      turns += fmt::format(
          "{{\"observation\": {}, \"plan\": {}, \"reward\": {}, \"outcome\": {}, \"speedup\": {}, \"coverage\": {}, "
          "\"hacking\": {}, \"message\": {}}}",
          json_string(r.observations[size_t(i)]), json_string(r.actions[size_t(i)]), reward.data_ptr<double>()[i],
          json_string(to_string(classify(ev))), ev.speedup, ev.coverage, json_string(hacking_flag_names(ev.hacking_flags)),
          json_string(ev.message.substr(0, 300)));
    }
    out += fmt::format("{{\"step\": {}, \"task\": {}, \"episode\": {}, \"turns\": [{}]}}\n", step,
                       json_string(r.task_ids[size_t(g)]), e, turns);
    ++episodes;
  }
  return out;
}

}  // namespace

void Trainer::train(bool resume_run) {
  State& s = *s_;
  const TrainConfig& c = s.config;
  const bool writer = s.rank == 0;  // data parallel: rank 0 alone writes the run directory
  if (writer) fs::create_directories(c.run.dir);
  const std::string metrics_path = (fs::path(c.run.dir) / "metrics.jsonl").string();
  const std::string samples_path = (fs::path(c.run.dir) / "samples.jsonl").string();
  if (resume_run) {
    if (!resume() && c.run.progress && writer)
      fmt::print(stderr, "turnrl: no checkpoint in '{}'; starting at step 0\n", c.run.dir);
  } else if (!list_checkpoints(s.checkpoint_root()).empty()) {
    fail("run.dir '{}' already holds checkpoints; pass --resume to continue that run, or choose another run.dir",
         c.run.dir);
  }
  JsonlWriter metrics, samples;
  if (writer) {
    for (const std::string& path : {metrics_path, samples_path})
      for (const DroppedLine& d : truncate_metrics_after(path, s.step))
        fmt::print(stderr, "turnrl: resume: dropped line {} of '{}' ({}): {}\n", d.line, path, d.reason, d.text);
    write_file_atomically((fs::path(c.run.dir) / "config.yaml").string(), config_to_yaml(c));
    metrics = JsonlWriter(metrics_path);
    samples = JsonlWriter(samples_path);
  }
  if (s.step < c.trainer.steps && !s.train_tasks.tasks.empty())
    probe_evaluator(*s.evaluator, s.train_tasks.tasks.front().id);
  ProgressLine progress(s.step, c.run.progress && writer);
  while (s.step < c.trainer.steps) {
    const Metrics m = train_step();
    if (writer) {
      metrics.write_line(metrics_to_json(m));
      if (c.run.samples_per_step > 0) {
        const std::string lines = sample_lines(s.last_rollouts, s.step, c.run.samples_per_step);
        if (!lines.empty()) samples.write_line(lines.substr(0, lines.size() - 1));
      }
    }
    ProgressSample p;
    p.step = s.step;
    p.total_steps = c.trainer.steps;
    p.rollouts = int64_t(m.at("rollout/episodes"));
    p.evaluations = int64_t(m.at("perf/evaluations"));
    p.step_seconds = m.at("time/step_s");
    p.reward = m.count("reward/mean") ? m.at("reward/mean") : 0.0;
    p.fast = m.count("kernel/fast@1.2") ? m.at("kernel/fast@1.2") : 0.0;
    progress.update(p);
    std::string checkpoint;
    if ((c.checkpoint.every > 0 && s.step % c.checkpoint.every == 0) || s.step == c.trainer.steps)
      checkpoint = save_checkpoint();
    if (const int signal = agreed_stop_signal(s.comm.get())) {
      progress.finish();
      const std::string where = checkpoint.empty() && c.checkpoint.on_stop ? save_checkpoint() : checkpoint;
      if (writer)
        fmt::print(stderr, "turnrl: stopped by {} after step {}; {}\n", strsignal(signal), s.step,
                   where.empty() ? "no checkpoint written (checkpoint.on_stop: false)" : "checkpoint in " + where);
      if (s.comm) s.comm->barrier();
      return;
    }
  }
  progress.finish();
  if (s.comm) s.comm->barrier();  // no rank returns before rank 0's last checkpoint is written
}

}  // namespace turnrl
