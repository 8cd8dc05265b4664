// A multi-turn environment of your own, trained by turnrl's generic Trainer with TRLOO: a
// number-guessing game. Each task hides a number in 0..4; the policy guesses one digit a turn, the
// environment answers "higher" or "lower", and a hit ends the episode with reward 1. Nothing here
// is about kernels: the game is an Environment, its token format an ActionCodec, the policy the
// built-in TransformerPolicy, and the Trainer does rollouts, TRLOO, PPO and checkpoints.
//
//   build/bin/own_environment [--steps N] [--check-rise]
//
// --check-rise exits with status 1 unless the share of episodes that find the number grows from
// the first five steps to the last five (CTest runs it so).
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <torch/utils.h>

#include <turnrl/core/error.h>
#include <turnrl/model/transformer.h>
#include <turnrl/rl/trainer.h>

using namespace turnrl;

namespace {

constexpr int kSecrets = 5;   // the hidden number is 0..4 (the policy may guess any digit)
constexpr int kMaxTurns = 3;  // 3 halvings find any of 5 numbers: a perfect player always wins

// The game's whole vocabulary, one token each.
enum Token : int64_t { kPad = 0, kStart = 1, kHigher = 2, kLower = 3, kDigit0 = 4, kVocab = kDigit0 + 10 };

class GuessingGame : public Environment {
 public:
  Observation reset(const Task& task) override {
    secret_ = std::stoi(task.metadata.at("secret"));
    turns_ = 0;
    done_ = false;
    // The compact form is what the codec reads; messages are there for people.
    return {{{"user", "Guess my number, 0 to 4."}}, 0, "start"};
  }

  StepResult step(const Action& action) override {
    if (done_) fail("GuessingGame::step: the episode is over; call reset() first");
    // Anything but one digit counts as a guess of -1 (so the answer is "higher").
    const int guess = action.text.size() == 1 && std::isdigit(static_cast<unsigned char>(action.text[0]))
                          ? action.text[0] - '0'
                          : -1;
    ++turns_;
    StepResult out;
    out.reward = guess == secret_ ? 1.0 : 0.0;
    out.feedback = guess == secret_ ? "correct" : guess < secret_ ? "higher" : "lower";
    done_ = guess == secret_ || turns_ == kMaxTurns;
    out.done = done_;
    out.observation = {{{"user", out.feedback}}, turns_, out.feedback};
    return out;
  }

 private:
  int secret_ = 0, turns_ = 0;
  bool done_ = true;
};

// Token-in/token-out: each prompt is the episode's sequence so far plus the game's answer.
class GuessCodec : public ActionCodec {
 public:
  TokenIds prompt(const EpisodeTokens& so_far, const Observation& observation) const override {
    if (so_far.sequence.empty()) return {kStart};
    TokenIds ids = so_far.sequence;
    ids.push_back(observation.compact == "higher" ? kHigher : kLower);
    return ids;
  }
  std::string action_text(const TokenIds& response) const override {
    const int64_t id = response.at(0);
    return id >= kDigit0 && id < kVocab ? std::string(1, char('0' + (id - kDigit0))) : std::string("?");
  }
  SamplingOptions sampling(const SamplingOptions& base) const override {
    SamplingOptions out = base;
    return out.max_new(1).pad(kPad);
  }
  std::string observation_text(const Observation& observation) const override { return observation.compact; }
};

double mean_of(const std::vector<double>& v, size_t first, size_t count) {
  double s = 0;
  for (size_t i = first; i < first + count; ++i) s += v[i];
  return s / double(count);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 40;
  bool check_rise = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) steps = std::atoll(argv[++i]);
    else if (arg == "--check-rise") check_rise = true;
    else return std::fprintf(stderr, "usage: own_environment [--steps N] [--check-rise]\n"), 2;
  }
  try {
    torch::manual_seed(1);
    TrainerParts parts;
    parts.policy = std::make_shared<TransformerPolicy>(
        TransformerOptions().vocab(kVocab).d_model(32).layers(2).heads(2).max_seq(2 * kMaxTurns + 2));
    parts.environments = pool_of([] { return std::make_unique<GuessingGame>(); });
    parts.codec = std::make_shared<GuessCodec>();
    for (int secret = 0; secret < kSecrets; ++secret) {
      Task task;
      task.id = "guess_" + std::to_string(secret);
      task.metadata["secret"] = std::to_string(secret);
      parts.tasks.push_back(task);
    }
    EngineOptions& o = parts.options;
    o.run.dir = (std::filesystem::temp_directory_path() / "turnrl_own_environment").string();
    o.trainer.steps = steps;
    o.trainer.tasks_per_step = kSecrets;
    o.trainer.samples_per_task = 16;
    o.trainer.ppo_epochs = 4;  // four optimizer steps on each batch: a game this small learns in seconds
    o.trainer.seed = 1;
    o.optimizer.lr = 1e-2;
    o.estimator = "trloo";
    o.returns.gamma = 0.8;  // an early hit is worth more than a late one
    o.policy_loss.loss_scale_factor = 1;  // the kernel recipe's 1000 is the recipe's, not PPO's
    o.policy_loss.entropy_coef = 0.01;    // keeps exploring: a policy that stops guessing stops learning
    parts.stages = {std::make_shared<MeaningfulTurnMaskStage>(), std::make_shared<GroupFilterStage>(GroupFilterOptions())};
    Trainer trainer(std::move(parts));

    std::vector<double> found;  // share of episodes that found the number, per step
    for (int64_t step = 0; step < steps; ++step) {
      const Metrics m = trainer.train_step();
      found.push_back(m.at("reward/best_mean"));
      std::printf("step %3lld  found %.2f  turns %.2f  loss %+.4f\n", static_cast<long long>(step + 1), found.back(),
                  m.at("rollout/mean_turns"), m.count("actor/loss") ? m.at("actor/loss") : 0.0);
    }
    if (check_rise) {
      if (found.size() < 10) return std::fprintf(stderr, "--check-rise needs at least 10 steps\n"), 2;
      const double first = mean_of(found, 0, 5), last = mean_of(found, found.size() - 5, 5);
      std::printf("found: first five steps %.2f, last five %.2f\n", first, last);
      if (last < first + 0.15) return std::fprintf(stderr, "own_environment: the reward did not rise\n"), 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "own_environment: %s\n", e.what());
    return 1;
  }
  return 0;
}
