#pragma once
// The environment seam: what a user implements for a new task family. One Environment object runs
// one episode at a time (reset, then step until done). step_many() lets an environment type step
// many of its episodes at once, so that an expensive shared resource (KernelEnv: the evaluator
// pool) sees one full batch instead of one request at a time. No LibTorch here.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "turnrl/eval/evaluator.h"
#include "turnrl/model/chat_tokenizer.h"

namespace turnrl {

struct Task;

// What the policy sees before its next turn: the whole conversation so far, as messages.
struct Observation {
  std::vector<ChatMessage> messages;  // history mode 'all': every earlier turn stays in context
  int turn = 0;                   // 0-based index of the turn the policy is about to take
  // The same state in a few words for policies too small to read prose (optional): e.g.
  // "task=relu_bias turn=1 last=mismatch". Environments that offer it list its words in a
  // vocabulary function so a tokenizer can make each word one token.
  std::string compact;
};

// The policy's turn: free text (a response with a fenced code block, or a kernel plan).
struct Action {
  std::string text;
};

struct StepResult {
  Observation observation;  // the next turn's context (unchanged when done)
  double reward = 0;
  bool done = false;
  std::string feedback;                 // what the environment told the policy about this turn
  std::map<std::string, double> info;   // per-turn metrics (speedup, coverage, correct, ...)
  std::optional<EvalResult> eval;       // the evaluator's verdict, when one was asked for
};

class Environment {
 public:
  virtual ~Environment() = default;

  // Starts an episode on `task`; returns the first turn's context.
  virtual Observation reset(const Task& task) = 0;

  // Plays one turn. After done, step() throws turnrl::Error until the next reset().
  virtual StepResult step(const Action& action) = 0;

  // Steps episodes[i] with actions[i] for every i; every episode must be an environment of the
  // same concrete type as *this (this object need not be among them). The default calls step()
  // on each in turn; override it to batch shared work.
  virtual std::vector<StepResult> step_many(const std::vector<Environment*>& episodes,
                                            const std::vector<Action>& actions);
};

// Steps a batch of live episodes: checks sizes, then lets the first episode's type step them all.
std::vector<StepResult> step_batch(const std::vector<Environment*>& episodes, const std::vector<Action>& actions);

}  // namespace turnrl
