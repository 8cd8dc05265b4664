#pragma once
// KernelEnv: the multi-turn kernel-writing environment. Turn 1's prompt states the task; each
// turn the candidate is extracted from the action (the last fenced code block, or a kernel plan
// expanded into source), evaluated for real (compile, check, time, profile, hacking checks),
// scored by the reward policy, and the feedback (compile error, first mismatch, runtime error,
// speedup and profile) is appended to the conversation for the next turn, in the form of the
// reference's tool_response template. Episodes end at max_turns, or early once a target
// (correct and speedup >= target_speedup) is met.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "turnrl/rl/environment.h"
#include "turnrl/rl/task.h"
#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/kernel_reward.h"

namespace turnrl {

class ConfigReader;
class ConfigWriter;

// How the policy answers.
enum class ActionFormat {
  code,  // a response holding the kernel source in a fenced block tagged with the task's language
  plan,  // a kernel plan (kernel_plan.h) that the environment expands into source
};

struct KernelEnvOptions {
  int max_turns = 3;                     // the recipe's MAX_TURN
  std::optional<double> target_speedup;  // stop early once correct with speedup >= this
  ActionFormat action = ActionFormat::code;
  size_t feedback_chars = 1500;          // compiler / runtime messages in feedback are trimmed to this
  int correctness_trials = 5;            // forwarded to EvalRequest
  int timing_trials = 20;
  uint64_t seed = 0;                     // EvalRequest.seed (0 = fresh seeds every evaluation)
  std::string system_prompt =
      "You are an expert performance engineer. You write fast, correct kernels.";

  KernelEnvOptions& with_max_turns(int v) { max_turns = v; return *this; }
  KernelEnvOptions& with_target_speedup(double v) { target_speedup = v; return *this; }
  KernelEnvOptions& with_action(ActionFormat v) { action = v; return *this; }
  KernelEnvOptions& with_timing_trials(int v) { timing_trials = v; return *this; }
  KernelEnvOptions& with_seed(uint64_t v) { seed = v; return *this; }
};

// Reads max_turns, target_speedup, action (code | plan), feedback_chars, correctness_trials,
// timing_trials, seed, system_prompt.
void read_options(ConfigReader& reader, KernelEnvOptions& options);
// Writes the section's keys (what read_options reads), with their help when annotating.
void write_options(ConfigWriter& writer, const KernelEnvOptions& options);

// The candidate found in a response.
struct Extraction {
  bool ok = false;
  std::string code;
  std::string error;  // why not, for the format feedback
};

// The last fenced block (```tag ... ```) of `response`; its tag must be one of `languages`
// (an untagged block is an error that says which tag was expected).
Extraction extract_candidate(const std::string& response, const std::vector<std::string>& languages);

// The kernel domain's StepResult payload: the evaluator's verdict on the turn's candidate (a format
// failure when no candidate could be extracted) and its reward breakdown.
struct KernelVerdict : StepPayload {
  EvalResult eval;
  KernelReward reward;

  KernelVerdict(EvalResult eval, KernelReward reward) : eval(std::move(eval)), reward(reward) {}
  std::string serialize() const override;  // the evaluator's wire encoding (eval_codec.h)
  // outcome, speedup, coverage, hacking and the first 300 characters of the message.
  std::string json_fields() const override;
};

// PayloadDecoder of KernelVerdict (the reward is recomputed by `reward`).
PayloadDecoder kernel_verdict_decoder(KernelRewardPolicy reward);

// The verdict of a StepResult payload; throws when the payload is not a KernelVerdict.
const KernelVerdict& kernel_verdict(const StepPayload* payload);

// One played turn, as the environment recorded it.
struct TurnRecord {
  std::string action;
  std::string candidate;  // the source that was evaluated ("" on a format error)
  EvalResult eval;
  KernelReward reward;
  std::string feedback;
};

class KernelEnv : public Environment {
 public:
  KernelEnv(std::shared_ptr<KernelEvaluator> evaluator, KernelRewardPolicy reward, KernelEnvOptions options = {});

  Observation reset(const Task& task) override;
  StepResult step(const Action& action) override;

  const std::vector<TurnRecord>& history() const { return history_; }
  const Task& task() const { return task_; }
  bool done() const { return done_; }
  const KernelEnvOptions& options() const { return options_; }

  // The first user message for a task (exposed for tests and for offline prompt building).
  std::string task_prompt(const Task& task) const;

 private:
  // Turns an action into an evaluation request, or a format failure (no request).
  std::optional<EvalRequest> prepare(const Action& action, TurnRecord& record) const;
  StepResult finish(TurnRecord record);
  // Steps envs[i] with actions[i], one evaluate() call per distinct evaluator.
  static std::vector<StepResult> step_together(const std::vector<KernelEnv*>& envs, const std::vector<Action>& actions);
  friend class KernelEnvPool;

  std::shared_ptr<KernelEvaluator> evaluator_;
  KernelRewardPolicy reward_;
  KernelEnvOptions options_;
  Task task_;
  Observation observation_;
  std::vector<TurnRecord> history_;
  bool done_ = true;
};

// The episodes of a kernel rollout: every step sends all live episodes' candidates to the evaluator
// in one call, so its worker pool sees the whole batch instead of one request at a time.
class KernelEnvPool : public EnvironmentPool {
 public:
  explicit KernelEnvPool(std::vector<std::unique_ptr<KernelEnv>> environments);
  std::vector<StepResult> step(const std::vector<size_t>& episodes, const std::vector<Action>& actions) override;

 private:
  static std::vector<std::unique_ptr<Environment>> as_environments(std::vector<std::unique_ptr<KernelEnv>> envs);
};

// Pools of KernelEnvs sharing `evaluator` (the rollout's environment factory of the kernel recipe).
EnvironmentPoolFactory kernel_env_pools(std::shared_ptr<KernelEvaluator> evaluator, KernelRewardPolicy reward,
                                        KernelEnvOptions options);

// The feedback text of a turn: status, error class and trimmed message, the first mismatching
// element and error sizes, speedup and timings, the profile (share of time in the candidate, top
// kernels), hacking reasons, and the reward.
std::string render_feedback(const EvalResult& eval, const KernelReward& reward, size_t message_chars);

const char* to_string(ActionFormat v);

// Observation::compact of KernelEnv: "task=<id> turn=<k> last=<outcome> speed=<bucket>
// own=<bucket>", where outcome is none (first turn), format, compile, runtime, incorrect, hacking or
// correct; speed buckets the last speedup (<1, 1-1.5, 1.5-2, >=2) and own the share of time in
// the candidate's own code (<0.3, 0.3-0.7, >=0.7).
std::string compact_observation(const std::string& task_id, int turn, const TurnRecord* last);
// Every word compact_observation can produce for these tasks and turns (tokenizer vocabulary).
std::vector<std::string> compact_vocabulary(const TaskSet& tasks, int max_turns);

}  // namespace turnrl
