#pragma once
// The environment seam: what a user implements for a new task family. One Environment object runs
// one episode at a time (reset, then step until done). An EnvironmentPool holds the episodes a
// rollout plays side by side and steps them together; a domain overrides the pool's step() to
// batch shared work (KernelEnv's pool sends every episode's candidate to the evaluator in one
// call). No LibTorch here, and nothing of any domain: a domain's per-turn verdict travels in
// StepResult::payload.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "turnrl/rl/task.h"
#include "turnrl/model/chat_tokenizer.h"

namespace turnrl {

// What the policy sees before its next turn: the whole conversation so far, as messages.
struct Observation {
  std::vector<ChatMessage> messages;  // every earlier turn stays in context
  int turn = 0;                       // 0-based index of the turn the policy is about to take
  // The same state in a few words for policies too small to read prose (optional): e.g.
  // "task=relu_bias turn=1 last=mismatch". Environments that offer it list its words in a
  // vocabulary function so a tokenizer can make each word one token.
  std::string compact;
};

// The policy's turn: free text (a response with a fenced code block, or a kernel plan).
struct Action {
  std::string text;
};

// A domain's record of one turn (the kernel domain: the evaluator's verdict), carried from the
// environment through the rollout batch to the domain's own stages and metrics. A small virtual
// base rather than std::any because the generic engine must move payloads between ranks (data
// parallel) and into transcripts without knowing their type: both go through these virtuals.
class StepPayload {
 public:
  virtual ~StepPayload() = default;
  // Bytes that the domain's PayloadDecoder turns back into an equal payload.
  virtual std::string serialize() const = 0;
  // Extra fields of the turn's line in samples.jsonl: `"key": value` pairs joined by ", "
  // (valid JSON members), or "" for none.
  virtual std::string json_fields() const { return ""; }
};
using PayloadDecoder = std::function<std::shared_ptr<const StepPayload>(const std::string& bytes)>;

struct StepResult {
  Observation observation;  // the next turn's context (unchanged when done)
  double reward = 0;        // the turn's reward, the TurnBatch.reward entry of its row
  bool done = false;
  std::string feedback;                          // what the environment told the policy about this turn
  std::map<std::string, double> info;            // per-turn metrics (domain-defined)
  std::shared_ptr<const StepPayload> payload;    // the domain's record of the turn (may be null)
};

class Environment {
 public:
  virtual ~Environment() = default;

  // Starts an episode on `task`; returns the first turn's context.
  virtual Observation reset(const Task& task) = 0;

  // Plays one turn. After done, step() throws turnrl::Error until the next reset().
  virtual StepResult step(const Action& action) = 0;
};

// The episodes of one rollout: environment i plays episode i. step() takes the live episodes'
// indices and actions; the default steps each environment in turn. A domain whose environments
// share an expensive resource derives from this and batches it (KernelEnvPool).
class EnvironmentPool {
 public:
  explicit EnvironmentPool(std::vector<std::unique_ptr<Environment>> environments);
  virtual ~EnvironmentPool() = default;

  size_t size() const { return environments_.size(); }
  Environment& at(size_t episode);

  // Starts episode `episode` on `task`.
  Observation reset(size_t episode, const Task& task) { return at(episode).reset(task); }
  // Steps environment episodes[i] with actions[i] for every i (indices distinct, below size()).
  virtual std::vector<StepResult> step(const std::vector<size_t>& episodes, const std::vector<Action>& actions);

 protected:
  // Throws unless episodes and actions pair up and every index is a distinct episode.
  void check_step(const std::vector<size_t>& episodes, const std::vector<Action>& actions) const;

 private:
  std::vector<std::unique_ptr<Environment>> environments_;
};

// Makes the pool of `episodes` environments a rollout plays.
using EnvironmentPoolFactory = std::function<std::unique_ptr<EnvironmentPool>(size_t episodes)>;

// A pool factory that steps one environment at a time, each made by `make_environment`.
EnvironmentPoolFactory pool_of(std::function<std::unique_ptr<Environment>()> make_environment);

}  // namespace turnrl
