// The generic rollout and stage machinery on a toy environment (no kernels): row order and ids,
// rewards and payloads from the environment, token-in/token-out prompts through a codec, early
// episode ends, pool and part checks, and the stage points of a Trainer.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include <torch/utils.h>

#include "model/hf_fixtures.h"
#include "turnrl/core/error.h"
#include "turnrl/model/chat_tokenizer.h"
#include "turnrl/model/transformer.h"
#include "turnrl/rl/chat_codec.h"
#include "turnrl/rl/trainer.h"

using namespace turnrl;

namespace {

// The turn's record in the toy game, to check that payloads travel with their rows.
struct ToyPayload : StepPayload {
  explicit ToyPayload(int turn) : turn(turn) {}
  std::string serialize() const override { return std::to_string(turn); }
  int turn;
};

// An episode lasts Task::level turns; a turn is worth its index, plus 0.5 when the action is "x".
class ToyEnv : public Environment {
 public:
  Observation reset(const Task& task) override {
    turns_ = task.level;
    turn_ = 0;
    return {{}, 0, "t0"};
  }
  StepResult step(const Action& action) override {
    if (turn_ >= turns_) fail("ToyEnv: episode over");
    StepResult out;
    out.reward = turn_ + (action.text == "x" ? 0.5 : 0.0);
    out.payload = std::make_shared<ToyPayload>(turn_);
    ++turn_;
    out.done = turn_ == turns_;
    out.observation = {{}, turn_, "t" + std::to_string(turn_)};
    return out;
  }

 private:
  int turns_ = 0, turn_ = 0;
};

// Prompts: the sequence so far plus one token naming the turn (2 + turn); a response token 1 is
// "x", anything else "y".
class ToyCodec : public ActionCodec {
 public:
  TokenIds prompt(const EpisodeTokens& so_far, const Observation& observation) const override {
    TokenIds ids = so_far.sequence;
    ids.push_back(2 + observation.turn);
    return ids;
  }
  std::string action_text(const TokenIds& response) const override { return response.at(0) == 1 ? "x" : "y"; }
  SamplingOptions sampling(const SamplingOptions& base) const override {
    SamplingOptions out = base;
    return out.max_new(1).pad(0);
  }
  std::string observation_text(const Observation& observation) const override { return observation.compact; }
};

std::vector<Task> toy_tasks() {
  std::vector<Task> tasks(2);
  tasks[0].id = "one_turn", tasks[0].level = 1;
  tasks[1].id = "three_turns", tasks[1].level = 3;
  return tasks;
}

std::shared_ptr<Policy> toy_policy() {
  torch::manual_seed(3);
  return std::make_shared<TransformerPolicy>(TransformerOptions().vocab(8).d_model(16).layers(1).heads(2).max_seq(16));
}

std::vector<int64_t> column(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kCPU, torch::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

TEST_CASE("rollouts of any environment: rows by episode and turn, rewards and payloads from the environment", "[trainer][rollout]") {
  const RolloutCollector collector(pool_of([] { return std::make_unique<ToyEnv>(); }), std::make_shared<ToyCodec>());
  auto policy = toy_policy();
  const RolloutBatch r = collector.collect(*policy, toy_tasks(), 2, SamplingOptions(), 11);
  const TurnBatch& b = r.batch;
  CHECK(r.episodes == 4);
  REQUIRE(b.size() == 2 * 1 + 2 * 3);
  CHECK(column(b.traj) == std::vector<int64_t>{0, 1, 2, 2, 2, 3, 3, 3});
  CHECK(column(b.turn) == std::vector<int64_t>{0, 0, 0, 1, 2, 0, 1, 2});
  CHECK(column(b.group) == std::vector<int64_t>{0, 0, 1, 1, 1, 1, 1, 1});
  CHECK(r.task_ids == std::vector<std::string>{"one_turn", "three_turns"});
  const torch::Tensor reward = b.reward.to(torch::kDouble);
  for (int64_t row = 0; row < b.size(); ++row) {
    INFO("row " << row);
    const int64_t turn = column(b.turn)[size_t(row)];
    CHECK(reward[row].item<double>() == double(turn) + (r.actions[size_t(row)] == "x" ? 0.5 : 0.0));
    CHECK(r.observations[size_t(row)] == "t" + std::to_string(turn));
    REQUIRE(r.payloads[size_t(row)]);
    CHECK(r.payloads[size_t(row)]->serialize() == std::to_string(turn));
    CHECK(b.response_mask[row].sum().item<int64_t>() == 1);
  }
  // Token-in/token-out: turn t's sequence is turn t-1's sequence, the turn token, the response.
  for (int64_t row : {3, 4}) {
    const torch::Tensor prev = b.tokens[row - 1].masked_select(b.attention_mask[row - 1]);
    const torch::Tensor mine = b.tokens[row].masked_select(b.attention_mask[row]);
    REQUIRE(mine.size(0) == prev.size(0) + 2);
    CHECK(torch::equal(mine.narrow(0, 0, prev.size(0)), prev));
    CHECK(mine[prev.size(0)].item<int64_t>() == 2 + column(b.turn)[size_t(row)]);
  }
  // The same seed draws the same rollout.
  const RolloutBatch again = collector.collect(*policy, toy_tasks(), 2, SamplingOptions(), 11);
  CHECK(torch::equal(again.batch.tokens, b.tokens));
  CHECK(again.actions == r.actions);
}

// ToyCodec with a budget of 4 tokens a turn and a context limit.
class ContextCodec : public ToyCodec {
 public:
  explicit ContextCodec(int64_t context) : context_(context) {}
  SamplingOptions sampling(const SamplingOptions& base) const override { return ToyCodec::sampling(base).max_new(4); }
  int64_t context_length() const override { return context_; }

 private:
  int64_t context_;
};

TEST_CASE("the context length ends an episode whose next prompt does not fit, marked truncated, and clips the budget", "[trainer][rollout]") {
  // Context 8, no stop token: turn 0's prompt is 1 token and its response the full 4; turn 1's
  // prompt is 1 + 4 + 1 = 6 tokens, so its budget is clipped to 8 - 6 = 2; turn 2's would be
  // 6 + 2 + 1 = 9 > 8: the three-turn episodes end after turn 1, marked truncated.
  torch::manual_seed(3);
  TransformerPolicy policy(TransformerOptions().vocab(8).d_model(16).layers(1).heads(2).max_seq(8));
  const RolloutCollector collector(pool_of([] { return std::make_unique<ToyEnv>(); }), std::make_shared<ContextCodec>(8));
  const RolloutBatch r = collector.collect(policy, toy_tasks(), 2, SamplingOptions(), 5);
  const TurnBatch& b = r.batch;
  REQUIRE(b.size() == 6);
  CHECK(column(b.traj) == std::vector<int64_t>{0, 1, 2, 2, 3, 3});
  CHECK(column(b.turn) == std::vector<int64_t>{0, 0, 0, 1, 0, 1});
  CHECK(r.truncated == std::vector<uint8_t>{0, 0, 0, 1, 0, 1});
  CHECK(column(b.response_mask.sum(1)) == std::vector<int64_t>{4, 4, 4, 2, 4, 2});
  for (int64_t row = 0; row < b.size(); ++row) CHECK(b.attention_mask[row].sum().item<int64_t>() <= 8);
  CHECK(rollout_metrics(r).at("rollout/truncated_episodes") == 2);
  // Kept rows keep their marks.
  const RolloutBatch kept = select_rollout_rows(r, torch::tensor({true, false, true, true, false, false}));
  CHECK(kept.truncated == std::vector<uint8_t>{0, 0, 1});

  // Without a limit nothing is truncated; a first prompt that fills the context is an error.
  const RolloutCollector unlimited(pool_of([] { return std::make_unique<ToyEnv>(); }), std::make_shared<ContextCodec>(0));
  auto roomy = toy_policy();
  const RolloutBatch all = unlimited.collect(*roomy, toy_tasks(), 1, SamplingOptions(), 5);
  CHECK(all.batch.size() == 4);
  CHECK(all.truncated == std::vector<uint8_t>(4, 0));
  CHECK(rollout_metrics(all).at("rollout/truncated_episodes") == 0);
  const RolloutCollector tiny(pool_of([] { return std::make_unique<ToyEnv>(); }), std::make_shared<ContextCodec>(1));
  CHECK_THROWS_WITH(tiny.collect(policy, toy_tasks(), 1, SamplingOptions(), 5),
                    Catch::Contains("task 'one_turn': its first prompt is 1 tokens") &&
                        Catch::Contains("context of 1 tokens"));
  // ChatCodec carries the policy's context (ChatPolicy::max_seq) to the collector.
  const auto bytes = std::make_shared<const ByteChatTokenizer>();
  CHECK(ChatCodec(bytes, 64, 512).context_length() == 512);
  CHECK(ChatCodec(bytes, 64).context_length() == 0);
  CHECK_THROWS_WITH(ChatCodec(bytes, 64, -1), Catch::Contains("context_length -1 is out of range"));
}

namespace {

// An HFPolicy seen through the Policy seam, either with its generate_turn (sequences kept between
// turns) or with the seam's default (generate every turn); records the tokens its engine reused.
class EpisodeAwareness : public Policy {
 public:
  EpisodeAwareness(std::unique_ptr<HFPolicy> inner, bool keep) : inner_(std::move(inner)), keep_(keep) {}
  TokenLogp forward_logp(const torch::Tensor& t, const torch::Tensor& a, const torch::Tensor& r) override {
    return inner_->forward_logp(t, a, r);
  }
  Rollout generate(const torch::Tensor& p, const torch::Tensor& m, const SamplingOptions& o) override {
    return inner_->generate(p, m, o);
  }
  Rollout generate_turn(const torch::Tensor& p, const torch::Tensor& m, const SamplingOptions& o,
                        const std::vector<int64_t>& episodes) override {
    return keep_ ? inner_->generate_turn(p, m, o, episodes) : inner_->generate(p, m, o);
  }
  void end_episodes() override {
    reused = inner_->engine()->stats().reused_tokens;
    inner_->end_episodes();
  }
  std::vector<torch::Tensor> parameters() override { return inner_->parameters(); }
  void save(const std::string& path) override { inner_->save(path); }
  void load(const std::string& path) override { inner_->load(path); }
  void train(bool on = true) override { inner_->train(on); }
  void to(torch::Device device) override { inner_->to(device); }
  void to(torch::Dtype dtype) override { inner_->to(dtype); }
  torch::Device device() const override { return inner_->device(); }
  int64_t reused = 0;

 private:
  std::unique_ptr<HFPolicy> inner_;
  bool keep_;
};

}  // namespace

TEST_CASE("rollouts through a policy that keeps each episode's sequence equal rollouts that re-prefill", "[trainer][rollout]") {
  const RolloutCollector collector(pool_of([] { return std::make_unique<ToyEnv>(); }), std::make_shared<ToyCodec>());
  EpisodeAwareness keeping(test::load_fixture("qwen3"), true), plain(test::load_fixture("qwen3"), false);
  const SamplingOptions sampling = SamplingOptions().temp(1.0);
  const RolloutBatch kept = collector.collect(keeping, toy_tasks(), 2, sampling, 5);
  const RolloutBatch full = collector.collect(plain, toy_tasks(), 2, sampling, 5);
  CHECK(torch::equal(kept.batch.tokens, full.batch.tokens));
  CHECK(torch::equal(kept.batch.response_mask, full.batch.response_mask));
  CHECK((kept.batch.rollout_logp - full.batch.rollout_logp).abs().max().item<double>() < 1e-4);
  // The three-turn episodes' second and third turns reuse all their previous prompt and response
  // but its last token: prompts [2], [2, r, 3], [2, r, 3, r', 4] -> 1 + 3 tokens per episode.
  CHECK(keeping.reused == 2 * (1 + 3));
  CHECK(plain.reused == 0);
}

TEST_CASE("pools, collectors and trainers name what is wrong with their parts", "[trainer][rollout]") {
  CHECK_THROWS_WITH(pool_of(nullptr), Catch::Contains("factory is empty"));
  const RolloutCollector short_pool([](size_t) { return pool_of([] { return std::make_unique<ToyEnv>(); })(1); },
                                    std::make_shared<ToyCodec>());
  auto policy = toy_policy();
  CHECK_THROWS_WITH(short_pool.collect(*policy, toy_tasks(), 2, SamplingOptions(), 1),
                    Catch::Contains("pool of 1 environments for 4 episodes"));
  CHECK_THROWS_WITH(RolloutCollector({}, std::make_shared<ToyCodec>()), Catch::Contains("environment factory"));
  TrainerParts parts;
  parts.environments = pool_of([] { return std::make_unique<ToyEnv>(); });
  parts.codec = std::make_shared<ToyCodec>();
  parts.tasks = toy_tasks();
  CHECK_THROWS_WITH(Trainer(parts), Catch::Contains("TrainerParts.policy"));
}

TEST_CASE("the trainer runs each stage at its point, in list order", "[trainer][stages]") {
  TrainerParts parts;
  parts.policy = toy_policy();
  parts.environments = pool_of([] { return std::make_unique<ToyEnv>(); });
  parts.codec = std::make_shared<ToyCodec>();
  parts.tasks = toy_tasks();
  parts.options.run.progress = false;
  std::vector<std::string> order;
  parts.stages = {
      make_stage([&](RolloutBatch& r, const StageContext&) {
        order.push_back("shape");
        r.batch.reward = r.batch.reward * 2;  // a user's reward shaping
        return Metrics{{"shape/ran", 1.0}};
      }),
      make_stage([&](RolloutBatch&, const StageContext& c) {
        order.push_back("late");
        return Metrics{{"late/step", double(c.step)}};
      }, BatchStage::Point::after_mismatch),
      make_stage([&](RolloutBatch&, const StageContext& c) {
        order.push_back("second");
        return Metrics{{"second/seed", double(c.seed)}};
      })};
  Trainer trainer(parts);
  RolloutBatch r = trainer.collect_rollouts(toy_tasks(), 2, SamplingOptions(), 5);
  const torch::Tensor before = r.batch.reward.clone();
  const Metrics early = trainer.run_stages(r, BatchStage::Point::before_logp, 7);
  CHECK(order == std::vector<std::string>{"shape", "second"});
  CHECK(torch::equal(r.batch.reward, before * 2));
  CHECK(early.at("second/seed") == double(parts.options.trainer.seed));
  CHECK(early.count("late/step") == 0);
  CHECK(trainer.run_stages(r, BatchStage::Point::after_mismatch, 7).at("late/step") == 7);
  order.clear();
  const Metrics m = trainer.train_step();
  CHECK(order == std::vector<std::string>{"shape", "second", "late"});
  CHECK(m.at("shape/ran") == 1);
  CHECK(m.count("reward/mean") == 1);
}

TEST_CASE("rollout waves: whole groups when there are enough, else episodes, never an empty wave", "[trainer][rollout]") {
  using Waves = std::vector<std::vector<int64_t>>;
  CHECK(rollout_waves(0, 8, 4, 1) == Waves{{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(rollout_waves(0, 8, 4, 2) == Waves{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(rollout_waves(0, 12, 2, 4) == Waves{{0, 1, 2, 3}, {4, 5}, {6, 7, 8, 9}, {10, 11}});
  // 3 groups for 4 waves: single episodes, 6 into 4.
  CHECK(rollout_waves(0, 6, 2, 4) == Waves{{0, 1}, {2}, {3, 4}, {5}});
  // A data-parallel shard that starts inside a group: groups {3}, {4, 5}, {6}.
  CHECK(rollout_waves(3, 7, 2, 2) == Waves{{3, 4, 5}, {6}});
  CHECK(rollout_waves(0, 3, 1, 8) == Waves{{0}, {1}, {2}});
  CHECK(rollout_waves(5, 5, 2, 3) == Waves{{}});
  CHECK_THROWS_WITH(RolloutCollector(pool_of([] { return std::make_unique<ToyEnv>(); }), std::make_shared<ToyCodec>(), 0),
                    Catch::Contains("trainer.rollout_waves: 0 is not allowed"));
}

namespace {

using Clock = std::chrono::steady_clock;
struct Span {
  Clock::time_point begin, end;
  bool overlaps(const Span& o) const { return begin < o.end && o.begin < end; }
};

// Spans of every environment step and every sampled turn, and the most steps ever in flight.
struct Timeline {
  std::mutex mutex;
  std::vector<Span> steps, samples;
  std::atomic<int> in_flight{0};
  int most_in_flight = 0;
  bool sampled_during_a_step() {
    for (const Span& g : samples)
      for (const Span& e : steps)
        if (g.overlaps(e)) return true;
    return false;
  }
};

// ToyEnv episodes whose steps take 40 ms (an evaluator's work).
class SlowPool : public EnvironmentPool {
 public:
  SlowPool(size_t episodes, Timeline& timeline) : EnvironmentPool(make(episodes)), timeline_(timeline) {}
  std::vector<StepResult> step(const std::vector<size_t>& episodes, const std::vector<Action>& actions) override {
    const Span started{Clock::now(), {}};
    const int now = ++timeline_.in_flight;
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    std::vector<StepResult> out = EnvironmentPool::step(episodes, actions);
    --timeline_.in_flight;
    std::lock_guard<std::mutex> lock(timeline_.mutex);
    timeline_.most_in_flight = std::max(timeline_.most_in_flight, now);
    timeline_.steps.push_back({started.begin, Clock::now()});
    return out;
  }

 private:
  static std::vector<std::unique_ptr<Environment>> make(size_t episodes) {
    std::vector<std::unique_ptr<Environment>> out;
    for (size_t i = 0; i < episodes; ++i) out.push_back(std::make_unique<ToyEnv>());
    return out;
  }
  Timeline& timeline_;
};

// A policy whose turns take at least 20 ms, recorded on the timeline.
class TimedPolicy : public TransformerPolicy {
 public:
  TimedPolicy(Timeline& timeline)
      : TransformerPolicy(TransformerOptions().vocab(8).d_model(16).layers(1).heads(2).max_seq(16)), timeline_(timeline) {}
  Rollout generate_turn(const torch::Tensor& p, const torch::Tensor& m, const SamplingOptions& o,
                        const std::vector<int64_t>& episodes) override {
    const Clock::time_point begin = Clock::now();
    Rollout out = TransformerPolicy::generate_turn(p, m, o, episodes);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(timeline_.mutex);
    timeline_.samples.push_back({begin, Clock::now()});
    return out;
  }

 private:
  Timeline& timeline_;
};

}  // namespace

TEST_CASE("rollout waves sample one wave while the environment steps another, one step at a time, rows as without waves", "[trainer][rollout]") {
  std::vector<int64_t> traj[2], turn[2], group[2];
  for (int64_t waves : {int64_t(1), int64_t(2)}) {
    INFO("waves " << waves);
    Timeline timeline;
    const RolloutCollector collector([&](size_t n) { return std::make_unique<SlowPool>(n, timeline); },
                                     std::make_shared<ToyCodec>(), waves);
    torch::manual_seed(3);
    TimedPolicy policy(timeline);
    const RolloutBatch r = collector.collect(policy, toy_tasks(), 2, SamplingOptions(), 11);
    const TurnBatch& b = r.batch;
    traj[waves - 1] = column(b.traj), turn[waves - 1] = column(b.turn), group[waves - 1] = column(b.group);
    CHECK(timeline.most_in_flight == 1);
    // Waves {0, 1} (one_turn) and {2, 3} (three_turns): 1 + 3 steps; one wave: 3 steps.
    CHECK(timeline.steps.size() == size_t(waves == 1 ? 3 : 4));
    CHECK(timeline.sampled_during_a_step() == (waves == 2));
    const torch::Tensor reward = b.reward.to(torch::kDouble);
    for (int64_t row = 0; row < b.size(); ++row)
      CHECK(reward[row].item<double>() == double(turn[waves - 1][size_t(row)]) + (r.actions[size_t(row)] == "x" ? 0.5 : 0.0));
    CHECK(r.eval_seconds >= 0.04 * double(timeline.steps.size()));
  }
  CHECK(traj[0] == traj[1]);
  CHECK(turn[0] == turn[1]);
  CHECK(group[0] == group[1]);
  CHECK(traj[1] == std::vector<int64_t>{0, 1, 2, 2, 2, 3, 3, 3});
}
