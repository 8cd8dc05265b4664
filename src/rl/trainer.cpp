#include "turnrl/rl/trainer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>
#include <torch/utils.h>

#include "turnrl/algo/advantage.h"
#include "turnrl/algo/policy_loss.h"
#include "turnrl/algo/returns.h"
#include "turnrl/core/byte_io.h"
#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"
#include "turnrl/core/random.h"
#include "turnrl/rl/batch_metrics.h"
#include "turnrl/rl/checkpoint.h"
#include "turnrl/rl/distributed.h"
#include "turnrl/rl/episode_log.h"
#include "turnrl/rl/master_weights.h"
#include "turnrl/rl/micro_batches.h"
#include "turnrl/rl/progress.h"
#include "turnrl/rl/stop_request.h"
#include "turnrl/rl/tensorboard.h"

namespace turnrl {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
  ByteWriter w;
  for (const auto& [k, v] : mine) w.str(k), w.pod(v);
  Metrics total;
  for (const std::string& part : comm.all_gather(w.data()))
    for (ByteReader r(part); !r.at_end();) {
      const std::string key = r.str();
      total[key] += r.pod<double>();
    }
  return total;
}

// The largest of the ranks' values (a maximum does not add up like the other metrics).
double max_over_ranks(Communicator& comm, double mine) {
  double most = mine;
  for (const std::string& part : comm.all_gather(fmt::format("{:a}", mine))) most = std::max(most, std::strtod(part.c_str(), nullptr));
  return most;
}

constexpr const char* kRatioMax = "actor/ratio_max";

// This rank's contiguous share [first, end) of `count` items.
std::pair<int64_t, int64_t> shard_of(int64_t count, int rank, int world) {
  return {count * rank / world, count * (rank + 1) / world};
}

// The attention mask of `rows` of a batch (all valid when the batch has none).
torch::Tensor attention_rows(const TurnBatch& batch, const torch::Tensor& rows) {
  return batch.attention_mask.defined() ? batch.attention_mask.index_select(0, rows)
                                        : torch::ones({rows.size(0), batch.tokens.size(1)},
                                                      torch::dtype(torch::kBool).device(batch.tokens.device()));
}

}  // namespace

double scheduled_lr(const OptimizerConfig& o, int64_t step, int64_t total) {
  if (o.warmup_steps > 0 && step < o.warmup_steps) return o.lr * double(step + 1) / double(o.warmup_steps);
  if (o.schedule == "constant") return o.lr;
  const int64_t span = std::max<int64_t>(1, total - o.warmup_steps);
  const double progress = std::min(1.0, double(step - o.warmup_steps) / double(span));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine);
}

// ---------------------------------------------------------------------------------------------

struct Trainer::State {
  TrainerParts parts;
  std::unique_ptr<RolloutCollector> collector;
  std::unique_ptr<MasterWeights> masters;  // what the optimizer steps
  std::unique_ptr<torch::optim::AdamW> optimizer;
  torch::Device device = torch::kCPU;
  int64_t step = 0;
  int64_t optimizer_steps = 0;
  RolloutBatch last_rollouts;
  std::shared_ptr<Communicator> comm;        // null in the one-process world
  std::unique_ptr<GradientBuckets> buckets;  // with comm
  int rank = 0, world = 1;

  std::string checkpoint_root() const { return (fs::path(parts.options.run.dir) / "checkpoints").string(); }
};

Trainer::Trainer(TrainerParts parts, std::shared_ptr<Communicator> comm) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.parts = std::move(parts);
  const EngineOptions& c = s.parts.options;
  if (!s.parts.policy) fail("Trainer: TrainerParts.policy is null");
  if (s.parts.tasks.empty()) fail("Trainer: TrainerParts.tasks is empty; give at least one training task");
  for (size_t i = 0; i < s.parts.stages.size(); ++i)
    if (!s.parts.stages[i]) fail("Trainer: TrainerParts.stages[{}] is null", i);
  if (c.policy_loss.kl_loss_coef != 0)
    fail("policy_loss.kl_loss_coef: {} needs a reference policy, which the Trainer does not keep; allowed: 0",
         c.policy_loss.kl_loss_coef);
  s.collector = std::make_unique<RolloutCollector>(s.parts.environments, s.parts.codec, c.trainer.rollout_waves);
  s.device = s.parts.policy->device();
  // The trainer's log-probs are of the distribution the rollout drew from (up to top-k / top-p).
  s.parts.policy->set_logp_temperature(c.sampling.score_at_temperature ? c.sampling.temperature : 1.0);
  const DistributedEnv env = comm ? DistributedEnv{comm->rank(), comm->world_size(), comm->rank()}
                                  : distributed_env_from_environment();
  if (comm)
    s.comm = std::move(comm);
  else if (env.world_size > 1)
    s.comm = make_communicator(env, s.device, CommunicatorOptions{c.distributed.backend, c.distributed.timeout_seconds});
  if (s.comm) s.rank = s.comm->rank(), s.world = s.comm->world_size();
  if (c.trainer.threads > 0) torch::set_num_threads(int(c.trainer.threads));
  s.masters = std::make_unique<MasterWeights>(s.parts.policy->parameters(), c.optimizer.master_weights);
  s.optimizer = std::make_unique<torch::optim::AdamW>(
      s.masters->masters(), torch::optim::AdamWOptions(c.optimizer.lr)
                                        .betas(std::make_tuple(c.optimizer.beta1, c.optimizer.beta2))
                                        .eps(c.optimizer.eps)
                                        .weight_decay(c.optimizer.weight_decay));
  if (s.world > 1) {
    s.buckets = std::make_unique<GradientBuckets>(s.parts.policy->parameters(),
                                                  int64_t(c.distributed.bucket_mb * double(1 << 20)));
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
    for (const auto& p : s.parts.policy->parameters()) checksum += p.to(torch::kCPU, torch::kDouble).sum().item<double>();
  }
  const std::vector<std::string> seen = s.comm->all_gather(fmt::format("{:a}\n{}", checksum, s.parts.resolved_config));
  for (int r = 1; r < s.world; ++r)
    if (seen[size_t(r)] != seen[0])
      fail("distributed: rank {} has a different config or initial model than rank 0 (every rank must load the same "
           "config, overrides and model.init)",
           r);
}

Trainer::~Trainer() = default;

int64_t Trainer::step() const { return s_->step; }
int64_t Trainer::optimizer_steps() const { return s_->optimizer_steps; }
Policy& Trainer::policy() { return *s_->parts.policy; }
const RolloutCollector& Trainer::collector() const { return *s_->collector; }
const EngineOptions& Trainer::options() const { return s_->parts.options; }
const RolloutBatch& Trainer::last_rollouts() const { return s_->last_rollouts; }
int Trainer::rank() const { return s_->rank; }
int Trainer::world_size() const { return s_->world; }

std::vector<Task> Trainer::step_tasks(int64_t step) const {
  const auto& tasks = s_->parts.tasks;
  const int64_t count = int64_t(tasks.size()), per_step = s_->parts.options.trainer.tasks_per_step;
  std::vector<Task> out;
  std::vector<size_t> order;
  int64_t order_pass = -1;
  for (int64_t j = 0; j < per_step; ++j) {
    const int64_t flat = step * per_step + j, pass = flat / count;
    if (pass != order_pass) {
      order.resize(tasks.size());
      std::iota(order.begin(), order.end(), size_t(0));
      uint64_t state = stage_seed(uint64_t(s_->parts.options.trainer.seed), pass, StageSeed::task_order);
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
  return s_->collector->collect(*s_->parts.policy, tasks, samples_per_task, first_episode, end_episode, sampling, seed);
}

RolloutBatch Trainer::gather_rollouts(const RolloutBatch& shard) {
  State& s = *s_;
  if (s.world == 1) return shard;
  const TurnBatch& b = shard.batch;
  // Length-prefixed fields (core/byte_io.h): the row width first (ranks' widths may differ: chat rows grow with
  // the conversation), then the tensors, then per row the payload and texts.
  ByteWriter w;
  w.pod(b.tokens.size(1));
  for (const torch::Tensor* t : {&b.group, &b.traj, &b.turn, &b.reward, &b.tokens, &b.attention_mask, &b.response_mask,
                                 &b.rollout_logp})
    w.str(tensor_bytes(*t));
  for (size_t i = 0; i < shard.observations.size(); ++i) {
    const bool has_payload = shard.payloads[i] != nullptr;
    w.pod(has_payload);
    if (has_payload) w.str(shard.payloads[i]->serialize());
    w.str(shard.observations[i]), w.str(shard.actions[i]);
    w.pod(shard.truncated[i]);
  }
  w.pod(shard.episodes), w.pod(shard.generate_seconds), w.pod(shard.eval_seconds);
  const std::vector<std::string> parts = s.comm->all_gather(w.data());
  RolloutBatch r;
  r.task_ids = shard.task_ids;
  r.task_levels = shard.task_levels;
  std::vector<torch::Tensor> group, traj, turn, reward, tokens, amask, rmask, logp;
  int64_t widest = 0;
  for (const std::string& part : parts) {
    ByteReader in(part);
    const auto width = in.pod<int64_t>();
    widest = std::max(widest, width);
    group.push_back(tensor_from_bytes(in.str(), torch::kLong, 0));
    traj.push_back(tensor_from_bytes(in.str(), torch::kLong, 0));
    turn.push_back(tensor_from_bytes(in.str(), torch::kLong, 0));
    reward.push_back(tensor_from_bytes(in.str(), torch::kFloat, 0));
    tokens.push_back(tensor_from_bytes(in.str(), torch::kLong, width));
    amask.push_back(tensor_from_bytes(in.str(), torch::kBool, width));
    rmask.push_back(tensor_from_bytes(in.str(), torch::kBool, width));
    logp.push_back(tensor_from_bytes(in.str(), torch::kFloat, width));
    for (int64_t i = 0; i < group.back().size(0); ++i) {
      std::shared_ptr<const StepPayload> payload;
      if (in.pod<bool>()) {
        const std::string bytes = in.str();
        if (s.parts.decode_payload) payload = s.parts.decode_payload(bytes);
      }
      r.payloads.push_back(std::move(payload));
      r.observations.push_back(in.str());
      r.actions.push_back(in.str());
      r.truncated.push_back(in.pod<uint8_t>());
    }
    // Episodes add up; the step waited for the slowest rank.
    r.episodes += in.pod<int64_t>();
    r.generate_seconds = std::max(r.generate_seconds, in.pod<double>());
    r.eval_seconds = std::max(r.eval_seconds, in.pod<double>());
    if (!in.at_end()) fail("distributed: unread bytes after a rank's rollout shard");
  }
  // The pad of the token rows: any pad the ranks used is masked out everywhere (attention and
  // response false), so the value only has to be a valid id.
  auto widened = [widest](std::vector<torch::Tensor>& blocks) {
    for (torch::Tensor& t : blocks) t = pad_columns(t, widest, 0);
    return torch::cat(blocks);
  };
  // Rank r's shard holds episodes before rank r+1's, each in (traj, turn) order: so does the whole.
  TurnBatch& g = r.batch;
  g.group = torch::cat(group).to(s.device);
  g.traj = torch::cat(traj).to(s.device);
  g.turn = torch::cat(turn).to(s.device);
  g.reward = torch::cat(reward).to(s.device);
  g.tokens = widened(tokens).to(s.device);
  g.attention_mask = widened(amask).to(s.device);
  g.response_mask = widened(rmask).to(s.device);
  g.rollout_logp = widened(logp).to(s.device);
  g.turn_mask = torch::ones({g.group.size(0)}, torch::dtype(torch::kBool).device(s.device));
  finalize(g);
  return r;
}

Metrics Trainer::run_stages(RolloutBatch& r, BatchStage::Point point, int64_t step) {
  const StageContext context{step, uint64_t(s_->parts.options.trainer.seed)};
  Metrics m;
  for (const auto& stage : s_->parts.stages)
    if (stage->point() == point) merge(m, stage->apply(r, context));
  return m;
}

void Trainer::recompute_old_logp(TurnBatch& batch) {
  State& s = *s_;
  torch::NoGradGuard no_grad;
  const TrainerConfig& t = s.parts.options.trainer;
  // Data parallel: each rank its contiguous share of the rows, then all-gathered.
  const auto [first, end] = shard_of(batch.size(), s.rank, s.world);
  const auto device = batch.tokens.device();
  const torch::Tensor shard = torch::arange(first, end, torch::dtype(torch::kLong).device(device));
  const torch::Tensor tokens = batch.tokens.narrow(0, first, end - first), attention = attention_rows(batch, shard),
                      response = batch.response_mask.narrow(0, first, end - first);
  std::vector<int64_t> order(size_t(end - first));
  std::iota(order.begin(), order.end(), int64_t(0));
  torch::Tensor mine = torch::zeros({end - first, batch.tokens.size(1)}, torch::dtype(torch::kFloat).device(device));
  for (const MicroBatch& micro : plan_micro_batches(attention, order, t.micro_batch_size, t.micro_batch_tokens)) {
    const torch::Tensor sel = torch::tensor(micro.rows, torch::kLong).to(device);
    const auto cut = [&](const torch::Tensor& x) { return x.index_select(0, sel).narrow(1, micro.first_column, micro.width()); };
    mine.narrow(1, micro.first_column, micro.width())
        .index_copy_(0, sel, s.parts.policy->forward_logp(cut(tokens), cut(attention), cut(response)).logp);
  }
  if (s.world > 1) {
    std::vector<torch::Tensor> all;
    for (const std::string& part : s.comm->all_gather(tensor_bytes(mine.to(torch::kFloat))))
      all.push_back(tensor_from_bytes(part, torch::kFloat, batch.rollout_logp.size(1)));
    mine = torch::cat(all).to(batch.rollout_logp.device());
  }
  batch.old_logp = mine;
}

MismatchResult Trainer::correct_mismatch(TurnBatch& batch) const {
  MismatchResult result = compute_mismatch(batch, s_->parts.options.mismatch);
  batch.response_mask = result.response_mask;
  return result;
}

torch::Tensor Trainer::advantages(const TurnBatch& batch, torch::Tensor* returns_out) const {
  const EngineOptions& c = s_->parts.options;
  const torch::Tensor returns = compute_returns(batch, c.returns);
  if (returns_out) *returns_out = returns;
  return advantage_estimator(c.estimator)(batch, returns, c.advantage);
}

Metrics Trainer::update(const TurnBatch& batch, const torch::Tensor& advantages, const torch::Tensor& weights,
                        uint64_t seed) {
  State& s = *s_;
  const EngineOptions& c = s.parts.options;
  const torch::Tensor rows = batch.response_mask.any(1).nonzero().squeeze(1);
  const int64_t n = rows.size(0);
  Metrics m = {{"actor/rows", double(n)}};
  if (n == 0) {
    m["update/skipped"] = 1;
    return m;
  }
  UpdateRows update_rows;
  update_rows.tokens = batch.tokens.index_select(0, rows);
  update_rows.attention_mask = attention_rows(batch, rows);
  update_rows.response_mask = batch.response_mask.index_select(0, rows);
  update_rows.old_logp = batch.old_logp.index_select(0, rows);
  update_rows.advantages = advantages.index_select(0, rows);
  if (weights.defined()) update_rows.weights = weights.index_select(0, rows);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double share_per_epoch = 1.0 / double(c.trainer.ppo_epochs);
  Metrics sums;
  double loss_sum = 0, grad_norm_sum = 0;
  for (int64_t epoch = 0; epoch < c.trainer.ppo_epochs; ++epoch) {
    const torch::Tensor order =
        c.trainer.ppo_epochs == 1 ? torch::arange(n) : torch::randperm(n, generator, torch::kLong);
    const std::vector<MicroBatch> plan =
        plan_micro_batches(update_rows.attention_mask, std::vector<int64_t>(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + n),
                           c.trainer.micro_batch_size, c.trainer.micro_batch_tokens);
    s.masters->zero_gradients();
    const AccumulatedLoss accumulated =
        accumulate_policy_gradient(*s.parts.policy, update_rows, plan, c.policy_loss, s.rank, s.world);
    loss_sum += accumulated.loss * share_per_epoch;
    for (const auto& [k, v] : accumulated.metrics) {
      if (k == kRatioMax)
        sums[k] = std::max(sums.count(k) ? sums[k] : 0.0, v);
      else
        sums[k] += v * share_per_epoch;
    }
    m["actor/micro_batches"] = double(plan.size());
    if (s.world > 1) s.buckets->all_reduce_sum(*s.comm);
    s.masters->gather_gradients();
    const double max_norm = c.optimizer.grad_clip > 0 ? c.optimizer.grad_clip : std::numeric_limits<double>::infinity();
    grad_norm_sum += torch::nn::utils::clip_grad_norm_(s.masters->masters(), max_norm) * share_per_epoch;
    const double lr = scheduled_lr(c.optimizer, s.optimizer_steps, c.trainer.steps * c.trainer.ppo_epochs);
    for (auto& group : s.optimizer->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    s.optimizer->step();
    s.masters->publish();
    ++s.optimizer_steps;
    m["optim/lr"] = lr;
  }
  if (s.world > 1) {
    sums["actor/loss"] = loss_sum;
    // Every rank takes part in both collectives, with or without micro-batches of its own.
    const double ratio_max = sums.count(kRatioMax) ? sums[kRatioMax] : 0.0;
    sums.erase(kRatioMax);
    sums = sum_over_ranks(*s.comm, sums);
    sums[kRatioMax] = max_over_ranks(*s.comm, ratio_max);
    loss_sum = sums["actor/loss"];
  }
  merge(m, sums);
  m["actor/loss"] = loss_sum;
  m["optim/grad_norm"] = grad_norm_sum;
  return m;
}

Metrics Trainer::learn(RolloutBatch& r) {
  State& s = *s_;
  const EngineOptions& c = s.parts.options;
  Metrics m;
  s.last_rollouts = r;
  merge(m, rollout_metrics(r));
  merge(m, rollout_batch_metrics(r.batch));
  merge(m, run_stages(r, BatchStage::Point::before_logp, s.step));
  if (r.batch.size() > 0) {
    // Bypass trusts the rollout engine's log-probs as the proximal policy (verl's bypass_mode):
    // one forward pass fewer per step, and the mismatch weights are 1 by construction.
    if (c.mismatch.bypass)
      r.batch.old_logp = r.batch.rollout_logp;
    else
      recompute_old_logp(r.batch);
    const MismatchResult mismatch = correct_mismatch(r.batch);
    merge(m, mismatch.diagnostics.to_map());
    merge(m, run_stages(r, BatchStage::Point::after_mismatch, s.step));
    torch::Tensor returns;
    const torch::Tensor adv = advantages(r.batch, &returns);
    const torch::Tensor valid = r.batch.turn_mask_or_all();
    m["adv/abs_mean"] = adv.abs().masked_select(valid).mean().item<double>();
    m["returns/mean"] = returns.masked_select(valid).mean().item<double>();
    merge(m, advantage_metrics(r.batch, returns, adv));
    merge(m, update(r.batch, adv, mismatch.weights, stage_seed(uint64_t(c.trainer.seed), s.step, StageSeed::epoch_order)));
  } else {
    m["update/skipped"] = 1;
  }
  return m;
}

Metrics Trainer::train_step() {
  State& s = *s_;
  const EngineOptions& c = s.parts.options;
  const auto t0 = Clock::now();
  Metrics m = {{"step", double(s.step + 1)}};
  const std::vector<Task> tasks = step_tasks(s.step);
  const auto [first, end] = shard_of(int64_t(tasks.size()) * c.trainer.samples_per_task, s.rank, s.world);
  // Rank 0 draws what the one-process trainer draws; other ranks their own streams.
  uint64_t seed = stage_seed(uint64_t(c.trainer.seed), s.step, StageSeed::rollout);
  if (s.rank > 0) seed = stage_seed(seed, s.rank, StageSeed::rollout);
  const RolloutBatch shard = collect_rollout_shard(tasks, c.trainer.samples_per_task, first, end, rollout_sampling(c), seed);
  const auto t_gather = Clock::now();
  RolloutBatch r = gather_rollouts(shard);
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
        save_policy_checkpoint(*s.parts.policy, dir);
        save_checkpoint_file(dir + "/optimizer.pt", [&](const std::string& path) { torch::save(*s.optimizer, path); });
        if (s.masters->any())
          save_checkpoint_file(dir + "/master_weights.pt", [&](const std::string& path) { s.masters->save(path); });
        torch::serialize::OutputArchive state;
        state.write("step", torch::tensor(s.step, torch::kLong));
        state.write("optimizer_steps", torch::tensor(s.optimizer_steps, torch::kLong));
        state.write("seed", torch::tensor(s.parts.options.trainer.seed, torch::kLong));
        state.write("torch_rng", at::detail::getDefaultCPUGenerator().get_state());
        save_checkpoint_file(dir + "/trainer_state.pt", [&](const std::string& path) { state.save_to(path); });
        if (!s.parts.resolved_config.empty()) write_file(dir + "/config.yaml", s.parts.resolved_config);
      },
      s.parts.options.checkpoint.keep_last);
}

void Trainer::load_policy(const std::string& path) {
  load_policy_checkpoint(*s_->parts.policy, path);
  s_->masters->reset_from_model();
}

void Trainer::load_checkpoint(const std::string& dir) {
  State& s = *s_;
  for (const char* name : {policy_checkpoint_entry(*s.parts.policy), "optimizer.pt", "trainer_state.pt"})
    if (!fs::exists(fs::path(dir) / name)) fail("checkpoint '{}': missing {}", dir, name);
  load_policy(dir);
  torch::load(*s.optimizer, dir + "/optimizer.pt");
  // Checkpoints from before master weights (or with them off) hold only the rounded model.
  if (s.masters->any() && fs::exists(fs::path(dir) / "master_weights.pt")) s.masters->load(dir + "/master_weights.pt");
  torch::serialize::InputArchive state;
  state.load_from(dir + "/trainer_state.pt");
  torch::Tensor step, optimizer_steps, seed, rng;
  state.read("step", step);
  state.read("optimizer_steps", optimizer_steps);
  state.read("seed", seed);
  state.read("torch_rng", rng);
  if (seed.item<int64_t>() != s.parts.options.trainer.seed)
    fail("checkpoint '{}': written with trainer.seed {}, the config says {}; resume with the same seed", dir,
         seed.item<int64_t>(), s.parts.options.trainer.seed);
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

void Trainer::train(bool resume_run) {
  State& s = *s_;
  const EngineOptions& c = s.parts.options;
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
  TensorBoardWriter events;
  if (writer) {
    for (const std::string& path : {metrics_path, samples_path})
      for (const DroppedLine& d : truncate_metrics_after(path, s.step))
        fmt::print(stderr, "turnrl: resume: dropped line {} of '{}' ({}): {}\n", d.line, path, d.reason, d.text);
    if (!s.parts.resolved_config.empty())
      write_file_atomically((fs::path(c.run.dir) / "config.yaml").string(), s.parts.resolved_config);
    metrics = JsonlWriter(metrics_path);
    samples = JsonlWriter(samples_path);
    events = TensorBoardWriter(c.run.dir);
  }
  if (s.step < c.trainer.steps && s.parts.startup_check) s.parts.startup_check();
  ProgressLine progress(s.step, c.run.progress && writer);
  while (s.step < c.trainer.steps) {
    Metrics m = train_step();
    add_verl_metric_names(m);
    if (writer) {
      metrics.write_line(metrics_to_json(m));
      events.write_scalars(s.step, m);
      if (c.run.samples_per_step > 0) {
        const std::string lines = episode_lines(s.last_rollouts, s.step, c.run.samples_per_step);
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
