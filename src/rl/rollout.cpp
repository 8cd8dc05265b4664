#include "turnrl/rl/rollout.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
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

RolloutCollector::RolloutCollector(EnvironmentPoolFactory environments, std::shared_ptr<const ActionCodec> codec,
                                   int64_t waves)
    : environments_(std::move(environments)), codec_(std::move(codec)), waves_(waves) {
  if (!environments_) fail("RolloutCollector: the environment factory is empty");
  if (!codec_) fail("RolloutCollector: the action codec is null");
  if (waves_ < 1) fail("trainer.rollout_waves: {} is not allowed; allowed: integers >= 1 (1 = no overlap)", waves_);
}

RolloutBatch RolloutCollector::collect(Policy& policy, const std::vector<Task>& tasks, int64_t samples_per_task,
                                       const SamplingOptions& sampling, uint64_t seed) const {
  return collect(policy, tasks, samples_per_task, 0, int64_t(tasks.size()) * samples_per_task, sampling, seed);
}

std::vector<std::vector<int64_t>> rollout_waves(int64_t first_episode, int64_t end_episode, int64_t samples_per_task,
                                                int64_t waves) {
  const int64_t episodes = end_episode - first_episode;
  // Whole groups per wave where there are enough of them (a group's episodes share their first
  // prompt, which a prefix-sharing engine prefills once), else single episodes.
  const int64_t first_group = first_episode / samples_per_task;
  const int64_t groups = episodes > 0 ? (end_episode - 1) / samples_per_task - first_group + 1 : 0;
  const bool by_group = groups >= waves;
  const int64_t units = by_group ? groups : episodes;
  const int64_t count = std::max<int64_t>(1, std::min(waves, units));
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(count));
  for (int64_t e = first_episode; e < end_episode; ++e) {
    const int64_t unit = by_group ? e / samples_per_task - first_group : e - first_episode;
    out[size_t(unit * count / units)].push_back(e);
  }
  return out;
}

namespace {

// One wave's turn between its generation and the environment's answer.
struct TurnInFlight {
  size_t wave = 0;
  int turn = 0;
  std::vector<int64_t> episodes;  // the episodes that took the turn
  std::vector<TokenIds> prompts, responses;
  std::vector<Action> actions;
  Rollout generated;  // tokens on the host
  std::future<std::pair<std::vector<StepResult>, double>> answer;  // the results and the step's seconds
};

}  // namespace

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
  // Per wave: its live episodes and the turn they take next.
  std::vector<std::vector<int64_t>> live = rollout_waves(first_episode, end_episode, samples_per_task, waves_);
  std::vector<int> next_turn(live.size(), 0);
  policy.eval();
  const int64_t context = codec_->context_length();
  std::vector<size_t> last_row(static_cast<size_t>(episodes));  // per episode: its latest row

  // Samples wave w's next turn; nothing when none of its episodes has room for one (they end).
  auto generate = [&](size_t w) -> std::optional<TurnInFlight> {
    TurnInFlight f;
    f.wave = w;
    f.turn = next_turn[w]++;
    int64_t longest = 0;
    for (int64_t e : live[w]) {
      const size_t k = size_t(e - first_episode);
      TokenIds prompt = codec_->prompt(so_far[k], obs[k]);
      if (context > 0 && int64_t(prompt.size()) >= context) {
        if (f.turn == 0)
          fail("task '{}': its first prompt is {} tokens, which leaves no room for a response in the policy's context of "
               "{} tokens; allowed: prompts shorter than the context (model.max_seq)",
               tasks[size_t(e / samples_per_task)].id, prompt.size(), context);
        r.truncated[last_row[k]] = 1;
        continue;
      }
      longest = std::max(longest, int64_t(prompt.size()));
      f.episodes.push_back(e);
      f.prompts.push_back(std::move(prompt));
    }
    live[w] = f.episodes;
    if (f.episodes.empty()) return std::nullopt;
    SamplingOptions this_turn = turn_sampling;  // shares the generator: one stream across turns and waves
    if (context > 0) this_turn.max_new_tokens = std::min(turn_sampling.max_new_tokens, context - longest);
    const auto [prompt_tensor, prompt_mask] = left_pad(f.prompts, turn_sampling.pad_id, device);
    const auto t0 = Clock::now();
    // Each turn's prompt extends the episode's sequence: a policy that keeps sequences prefills
    // only the new tokens.
    const Rollout out = policy.generate_turn(prompt_tensor, prompt_mask, this_turn, f.episodes);
    r.generate_seconds += seconds_since(t0);
    f.generated.tokens = out.tokens.cpu().contiguous();
    f.generated.prompt_length = out.prompt_length;
    // A policy may leave the attention mask undefined: every position is then valid.
    f.generated.attention_mask =
        out.attention_mask.defined() ? out.attention_mask.cpu() : torch::ones_like(f.generated.tokens, torch::kBool);
    f.generated.response_mask = out.response_mask.cpu();
    f.generated.logp = out.logp.cpu();
    const torch::Tensor generated = out.num_generated.to(torch::kCPU, torch::kLong).contiguous();
    for (size_t i = 0; i < f.episodes.size(); ++i) {
      const int64_t* row = f.generated.tokens[int64_t(i)].data_ptr<int64_t>() + out.prompt_length;
      f.responses.emplace_back(row, row + generated.data_ptr<int64_t>()[i]);
      f.actions.push_back({codec_->action_text(f.responses.back())});
    }
    return f;
  };
  // Hands the turn to the environment on its own thread: the policy samples the next wave meanwhile.
  auto start_step = [&](TurnInFlight& f) {
    std::vector<size_t> stepping;
    for (int64_t e : f.episodes) stepping.push_back(size_t(e - first_episode));
    f.answer = std::async(std::launch::async, [&pool, stepping, actions = f.actions] {
      const auto t1 = Clock::now();
      std::vector<StepResult> results = pool->step(stepping, actions);
      return std::make_pair(std::move(results), seconds_since(t1));
    });
  };
  // Waits for the environment's answer and records the turn's rows.
  auto finish = [&](TurnInFlight& f) {
    auto [results, seconds] = f.answer.get();
    r.eval_seconds += seconds;
    if (results.size() != f.episodes.size())
      fail("RolloutCollector: the environment pool returned {} results for {} actions", results.size(),
           f.episodes.size());
    tokens.push_back(f.generated.tokens);
    amask.push_back(f.generated.attention_mask);
    rmask.push_back(f.generated.response_mask);
    logp.push_back(f.generated.logp);
    std::vector<int64_t> next;
    for (size_t i = 0; i < f.episodes.size(); ++i) {
      const int64_t e = f.episodes[i];
      const size_t k = size_t(e - first_episode);
      last_row[k] = group.size();
      r.truncated.push_back(0);
      group.push_back(e / samples_per_task);
      traj.push_back(e);
      turn.push_back(f.turn);
      rewards.push_back(results[i].reward);
      r.payloads.push_back(results[i].payload);
      r.observations.push_back(codec_->observation_text(obs[k]));
      r.actions.push_back(f.actions[i].text);
      so_far[k] = after_turn(f.prompts[i], f.responses[i], obs[k], turn_sampling.stop_tokens);
      obs[k] = std::move(results[i].observation);
      if (!results[i].done) next.push_back(e);
    }
    live[f.wave] = std::move(next);
  };

  // The schedule, with waves A and B: sample A; A steps while B is sampled; B steps while A's next
  // turn is sampled; ... At most one environment step is in flight (the pool is not asked to be
  // thread-safe), and a wave's turn is sampled only after its previous turn's answer (the policy
  // reads it). One wave is the plain loop: sample, step, sample, step.
  std::optional<TurnInFlight> pending;
  size_t cursor = 0;
  for (;;) {
    std::optional<TurnInFlight> sampled;
    for (size_t tried = 0; tried < live.size() && !sampled; ++tried) {
      const size_t w = (cursor + tried) % live.size();
      if (live[w].empty() || (pending && pending->wave == w)) continue;
      sampled = generate(w);
      cursor = w + 1;
    }
    if (pending) finish(*pending), pending.reset();
    if (sampled) {
      start_step(*sampled);
      pending = std::move(sampled);
    } else if (std::all_of(live.begin(), live.end(), [](const auto& w) { return w.empty(); })) {
      break;
    }
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
