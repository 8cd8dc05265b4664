#include "turnrl/rl/rollout.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <type_traits>

#include "turnrl/core/error.h"
#include "turnrl/algo/rejection.h"

namespace turnrl {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Concatenates row blocks of different widths, each padded on the right with `value`.
torch::Tensor cat_padded(const std::vector<torch::Tensor>& blocks, double value) {
  int64_t width = 0;
  for (const torch::Tensor& b : blocks) width = std::max(width, b.size(1));
  std::vector<torch::Tensor> padded;
  for (const torch::Tensor& b : blocks) padded.push_back(pad_columns(b, width, value));
  return torch::cat(padded);
}

}  // namespace

torch::Tensor pad_columns(const torch::Tensor& t, int64_t width, double value) {
  if (t.size(1) == width) return t;
  if (t.size(1) > width) fail("pad_columns: {} columns do not fit in {}", t.size(1), width);
  return torch::cat({t, torch::full({t.size(0), width - t.size(1)}, value, t.options())}, 1);
}

RolloutBatch select_rollout_rows(const RolloutBatch& r, const torch::Tensor& keep) {
  RolloutBatch out = r;
  out.batch = select_rows(r.batch, keep);
  const torch::Tensor host = keep.to(torch::kCPU, torch::kBool).contiguous();
  const bool* k = host.data_ptr<bool>();
  out.payloads.clear();
  out.observations.clear();
  out.actions.clear();
  out.truncated.clear();
  for (int64_t i = 0; i < host.size(0); ++i)
    if (k[i]) {
      out.payloads.push_back(r.payloads[size_t(i)]);
      out.observations.push_back(r.observations[size_t(i)]);
      out.actions.push_back(r.actions[size_t(i)]);
      out.truncated.push_back(r.truncated[size_t(i)]);
    }
  return out;
}

Metrics rollout_metrics(const RolloutBatch& r) {
  Metrics m;
  const int64_t rows = r.batch.size();
  m["rollout/turns"] = double(rows);
  m["rollout/episodes"] = double(r.episodes);
  m["rollout/mean_turns"] = r.episodes ? double(rows) / double(r.episodes) : 0.0;
  m["rollout/truncated_episodes"] = double(std::count(r.truncated.begin(), r.truncated.end(), uint8_t(1)));
  if (rows == 0) return m;
  const torch::Tensor reward = r.batch.reward.to(torch::kCPU, torch::kDouble).contiguous();
  const torch::Tensor traj = r.batch.traj.to(torch::kCPU).contiguous();
  const double* rw = reward.data_ptr<double>();
  const int64_t* tj = traj.data_ptr<int64_t>();
  std::map<int64_t, double> best_reward, last_reward;
  double reward_sum = 0;
  for (int64_t i = 0; i < rows; ++i) {
    reward_sum += rw[i];
    if (!best_reward.count(tj[i])) best_reward[tj[i]] = rw[i];
    best_reward[tj[i]] = std::max(best_reward[tj[i]], rw[i]);
    last_reward[tj[i]] = rw[i];  // rows are ordered by (traj, turn)
  }
  auto mean_of = [](const std::map<int64_t, double>& v) {
    double s = 0;
    for (const auto& kv : v) s += kv.second;
    return v.empty() ? 0.0 : s / double(v.size());
  };
  m["reward/mean"] = reward_sum / double(rows);
  m["reward/best_mean"] = mean_of(best_reward);
  m["reward/last_turn_mean"] = mean_of(last_reward);
  return m;
}

RolloutCollector::RolloutCollector(EnvironmentPoolFactory environments, std::shared_ptr<const ActionCodec> codec)
    : environments_(std::move(environments)), codec_(std::move(codec)) {
  if (!environments_) fail("RolloutCollector: the environment factory is empty");
  if (!codec_) fail("RolloutCollector: the action codec is null");
}

RolloutBatch RolloutCollector::collect(Policy& policy, const std::vector<Task>& tasks, int64_t samples_per_task,
                                       const SamplingOptions& sampling, uint64_t seed) const {
  return collect(policy, tasks, samples_per_task, 0, int64_t(tasks.size()) * samples_per_task, sampling, seed);
}

RolloutBatch RolloutCollector::collect(Policy& policy, const std::vector<Task>& tasks, int64_t samples_per_task,
                                       int64_t first_episode, int64_t end_episode, const SamplingOptions& sampling,
                                       uint64_t seed) const {
  const int64_t all_episodes = int64_t(tasks.size()) * samples_per_task;
  if (samples_per_task < 1 || first_episode < 0 || first_episode > end_episode || end_episode > all_episodes)
    fail("collect_rollout_shard: episodes [{}, {}) are not inside the {} x {} episodes of the step", first_episode,
         end_episode, tasks.size(), samples_per_task);
  const int64_t episodes = end_episode - first_episode;
  std::unique_ptr<EnvironmentPool> pool = environments_(size_t(episodes));
  if (!pool || int64_t(pool->size()) != episodes)
    fail("RolloutCollector: the environment factory made a pool of {} environments for {} episodes",
         pool ? int64_t(pool->size()) : 0, episodes);
  // Indexed by e - first_episode.
  std::vector<Observation> obs;
  std::vector<EpisodeTokens> so_far(static_cast<size_t>(episodes));
  for (int64_t e = first_episode; e < end_episode; ++e)
    obs.push_back(pool->reset(size_t(e - first_episode), tasks[size_t(e / samples_per_task)]));
  const SamplingOptions turn_sampling =
      codec_->sampling(sampling).rng(at::make_generator<at::CPUGeneratorImpl>(seed));
  const torch::Device device = policy.device();
  RolloutBatch r;
  r.episodes = episodes;
  for (const Task& t : tasks) r.task_ids.push_back(t.id), r.task_levels.push_back(t.level);
  std::vector<int64_t> group, traj, turn;
  std::vector<double> rewards;
  std::vector<torch::Tensor> tokens, amask, rmask, logp;
  std::vector<int64_t> live(static_cast<size_t>(episodes));
  std::iota(live.begin(), live.end(), first_episode);
  policy.eval();
  const int64_t context = codec_->context_length();
  std::vector<size_t> last_row(static_cast<size_t>(episodes));  // per episode: its latest row
  for (int t = 0; !live.empty(); ++t) {
    std::vector<TokenIds> prompts;
    std::vector<int64_t> fitting;
    int64_t longest = 0;
    for (int64_t e : live) {
      const size_t k = size_t(e - first_episode);
      TokenIds prompt = codec_->prompt(so_far[k], obs[k]);
      if (context > 0 && int64_t(prompt.size()) >= context) {
        if (t == 0)
          fail("task '{}': its first prompt is {} tokens, which leaves no room for a response in the policy's context of "
               "{} tokens; allowed: prompts shorter than the context (model.max_seq)",
               tasks[size_t(e / samples_per_task)].id, prompt.size(), context);
        r.truncated[last_row[k]] = 1;
        continue;
      }
      longest = std::max(longest, int64_t(prompt.size()));
      fitting.push_back(e);
      prompts.push_back(std::move(prompt));
    }
    live = std::move(fitting);
    if (live.empty()) break;
    SamplingOptions this_turn = turn_sampling;  // shares the generator: one stream across turns
    if (context > 0) this_turn.max_new_tokens = std::min(turn_sampling.max_new_tokens, context - longest);
    const auto [prompt_tensor, prompt_mask] = left_pad(prompts, turn_sampling.pad_id, device);
    const auto t0 = Clock::now();
    // Each turn's prompt extends the episode's sequence: a policy that keeps sequences prefills
    // only the new tokens.
    const Rollout out = policy.generate_turn(prompt_tensor, prompt_mask, this_turn, live);
    r.generate_seconds += seconds_since(t0);
    const torch::Tensor host_tokens = out.tokens.cpu().contiguous();
    const torch::Tensor generated = out.num_generated.to(torch::kCPU, torch::kLong).contiguous();
    std::vector<TokenIds> responses;
    std::vector<Action> actions;
    std::vector<size_t> stepping;
    for (size_t i = 0; i < live.size(); ++i) {
      const int64_t* row = host_tokens[int64_t(i)].data_ptr<int64_t>() + out.prompt_length;
      responses.emplace_back(row, row + generated.data_ptr<int64_t>()[i]);
      actions.push_back({codec_->action_text(responses.back())});
      stepping.push_back(size_t(live[i] - first_episode));
    }
    const auto t1 = Clock::now();
    std::vector<StepResult> results = pool->step(stepping, actions);
    r.eval_seconds += seconds_since(t1);
    if (results.size() != live.size())
      fail("RolloutCollector: the environment pool returned {} results for {} actions", results.size(), live.size());
    tokens.push_back(host_tokens);
    // A policy may leave the attention mask undefined: every position is then valid.
    amask.push_back(out.attention_mask.defined() ? out.attention_mask.cpu() : torch::ones_like(host_tokens, torch::kBool));
    rmask.push_back(out.response_mask.cpu());
    logp.push_back(out.logp.cpu());
    std::vector<int64_t> next;
    for (size_t i = 0; i < live.size(); ++i) {
      const int64_t e = live[i];
      const size_t k = size_t(e - first_episode);
      last_row[k] = group.size();
      r.truncated.push_back(0);
      group.push_back(e / samples_per_task);
      traj.push_back(e);
      turn.push_back(t);
      rewards.push_back(results[i].reward);
      r.payloads.push_back(results[i].payload);
      r.observations.push_back(codec_->observation_text(obs[k]));
      r.actions.push_back(actions[i].text);
      so_far[k] = after_turn(prompts[i], responses[i], obs[k], turn_sampling.stop_tokens);
      obs[k] = std::move(results[i].observation);
      if (!results[i].done) next.push_back(e);
    }
    live = std::move(next);
  }
  policy.end_episodes();
  policy.train();
  // Rows in (trajectory, turn) order.
  std::vector<int64_t> order(group.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return traj[size_t(a)] < traj[size_t(b)]; });
  auto permute = [&](const std::vector<int64_t>& v) {
    std::vector<int64_t> out;
    for (int64_t i : order) out.push_back(v[size_t(i)]);
    return torch::tensor(out, torch::kLong);
  };
  auto permute_rows = [&](auto& v) {
    std::remove_reference_t<decltype(v)> out;
    for (int64_t i : order) out.push_back(std::move(v[size_t(i)]));
    v = std::move(out);
  };
  permute_rows(r.payloads);
  permute_rows(r.observations);
  permute_rows(r.actions);
  permute_rows(r.truncated);
  permute_rows(rewards);
  const torch::Tensor index = torch::tensor(order, torch::kLong);
  TurnBatch& b = r.batch;
  b.group = permute(group).to(device);
  b.traj = permute(traj).to(device);
  b.turn = permute(turn).to(device);
  b.reward = torch::tensor(rewards, torch::kDouble).to(torch::kFloat).to(device);
  b.turn_mask = torch::ones({int64_t(order.size())}, torch::dtype(torch::kBool).device(device));
  if (tokens.empty()) {  // an empty shard (more ranks than episodes)
    tokens.push_back(torch::zeros({0, 0}, torch::kLong));
    amask.push_back(torch::zeros({0, 0}, torch::kBool));
    rmask.push_back(torch::zeros({0, 0}, torch::kBool));
    logp.push_back(torch::zeros({0, 0}, torch::kFloat));
  }
  b.tokens = cat_padded(tokens, double(turn_sampling.pad_id)).index_select(0, index).to(device);
  b.attention_mask = cat_padded(amask, 0).index_select(0, index).to(device);
  b.response_mask = cat_padded(rmask, 0).index_select(0, index).to(device);
  b.rollout_logp = cat_padded(logp, 0).index_select(0, index).to(device);
  finalize(b);
  return r;
}

}  // namespace turnrl
