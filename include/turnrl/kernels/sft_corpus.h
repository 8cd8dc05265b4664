#pragma once
// The SFT corpus: multi-turn kernel-writing conversations for a cold-start SFT before code-action
// RL (the paper's pipeline), made by playing real KernelEnv episodes. Each conversation is one
// episode of env.action: code with scripted assistant turns: the system and task messages are
// what KernelEnv::reset gives, every assistant turn is a fenced code block rendered from a kernel
// plan (kernel_plan.h: C++ for cpu tasks, CUDA for cuda, Triton for python) or a deliberate
// failure, and between turns comes the feedback KernelEnv::step renders after really evaluating
// the previous turn. So an SFT'd policy sees exactly the conversations RL will show it.
//
// Every assistant turn has an intended kind (a fast correct answer, a slow one, a wrong one, ...);
// the evaluator's verdict on it must match that kind, or the conversation is dropped and counted
// (never written). A conversation is a first attempt of some kind, then, unless it was already
// fast, one fast attempt after the feedback.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "turnrl/kernels/kernel_env.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/rl/task.h"
#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/kernel_reward.h"

namespace turnrl {

// What an assistant turn is meant to be, and the verdict that confirms it.
enum class SftTurnKind {
  fast,     // a fast plan: correct, unflagged, speedup >= fast_speedup
  slow,     // a scalar plan: correct, unflagged, speedup < slow_speedup
  wrong,    // a plan without remainder loops (bounds=unchecked): incorrect output
  compile,  // a rendered plan with its last ';' (python: ')') removed: compile error
  lazy,     // a plan that calls the library for everything (fallback=full): flagged as hacking
  hack,     // a plan with a result cache or in-place shortcut: flagged as hacking
  format,   // the code without a fence, or in a fence with no or the wrong tag: format failure
};

const char* to_string(SftTurnKind kind);
// "fast" ... "format"; throws turnrl::Error naming `field`, the word and the allowed kinds.
SftTurnKind parse_sft_turn_kind(const std::string& word, const std::string& field);
// Every kind, in the order above.
const std::vector<SftTurnKind>& sft_turn_kinds();

// The share of first attempts of each kind (the rest of a conversation is a fast attempt).
using SftMix = std::vector<std::pair<SftTurnKind, double>>;
// fast 0.25, slow 0.15, wrong 0.15, compile 0.15, lazy 0.10, hack 0.05, format 0.15 for cpu tasks;
// without `wrong` for any other backend (only cpu plans render a planted bug).
SftMix default_sft_mix(const std::string& backend = "cpu");
// "fast=0.3,slow=0.2,..." (kinds left out get 0); throws naming `field` on an unknown kind, a
// repeated kind, a share outside [0, 1] or shares that sum to 0.
SftMix parse_sft_mix(const std::string& text, const std::string& field);

struct SftCorpusOptions {
  int64_t conversations = 240;  // over every task, train and held-out ones alike (round robin)
  uint64_t seed = 1;            // kinds, plans, failure variants and evaluation inputs
  SftMix mix = default_sft_mix();
  double fast_speedup = 1.0;    // a fast turn's speedup must be at least this
  double slow_speedup = 0.8;    // a slow turn's speedup must be under this
  int64_t batch = 64;           // conversations played together (one evaluator call per turn)
  PlanStyle style = PlanStyle::full;  // how plans are written out (compact: short cpu programs)
  // Called after each batch with (conversations played, of the total).
  std::function<void(int64_t done, int64_t total)> progress;

  SftCorpusOptions& with_conversations(int64_t v) { conversations = v; return *this; }
  SftCorpusOptions& with_seed(uint64_t v) { seed = v; return *this; }
  SftCorpusOptions& with_mix(SftMix v) { mix = std::move(v); return *this; }
  SftCorpusOptions& with_fast_speedup(double v) { fast_speedup = v; return *this; }
  SftCorpusOptions& with_slow_speedup(double v) { slow_speedup = v; return *this; }
  SftCorpusOptions& with_batch(int64_t v) { batch = v; return *this; }
  SftCorpusOptions& with_style(PlanStyle v) { style = v; return *this; }
  SftCorpusOptions& with_progress(std::function<void(int64_t, int64_t)> v) { progress = std::move(v); return *this; }
};

// Throws turnrl::Error naming the field (conversations, mix, fast_speedup, slow_speedup, batch).
void validate(const SftCorpusOptions& options);

// One written conversation: the episode's messages, system first, ending with the last assistant
// turn, and what each assistant turn was and how the evaluator judged it.
struct SftConversation {
  std::vector<ChatMessage> messages;
  std::string task;
  std::string backend;
  bool held_out = false;              // a validation task: goes to validation.jsonl
  uint64_t seed = 0;                  // the conversation's own seed (plans, variants, inputs)
  std::vector<SftTurnKind> kinds;     // one per assistant turn
  std::vector<RewardOutcome> outcomes;  // the evaluator's verdict on each, as the reward saw it
  std::vector<std::string> plans;     // the kernel plan each turn was rendered from
};

// A conversation whose verdicts did not match its kinds.
struct SftDrop {
  std::string task;
  SftTurnKind kind;     // the turn that did not match
  int turn = 0;         // 0-based
  std::string verdict;  // what the evaluator said instead ("incorrect", "correct below the fast speedup", ...)
  double speedup = 0;   // the turn's measured speedup
};

struct SftCorpus {
  std::vector<SftConversation> train, validation;
  std::vector<SftDrop> dropped;
  std::vector<std::string> held_out_tasks;
  int64_t evaluations = 0;  // evaluator requests made (format failures make none)
};

// Plays options.conversations episodes over `train` and `held_out` tasks (each must have a plan
// template for its backend, kernel_plan.h) on KernelEnvs over `evaluator`, scored by `reward`, with
// `env` (action must be code; max_turns >= 2 unless the mix is fast only). When env.seed is 0 each
// conversation evaluates on inputs seeded by its own seed, so the corpus is reproducible.
SftCorpus make_sft_corpus(const TaskSet& train, const TaskSet& held_out, std::shared_ptr<KernelEvaluator> evaluator,
                          const KernelRewardPolicy& reward, const KernelEnvOptions& env, const SftCorpusOptions& options);

// One JSON line: {"messages":[{"role":...,"content":...},...],"meta":{task, backend, split, seed,
// kinds, outcomes, plans}} (the chat format TRL's and verl's SFT trainers read).
std::string sft_conversation_json(const SftConversation& conversation);

// Sizes of a corpus, for stats.json and the summary.
struct SftCorpusStats {
  int64_t conversations = 0, assistant_turns = 0, bytes = 0, assistant_bytes = 0;
  // As the byte chat tokenizer renders whole conversations (one token a byte): all of them, and
  // the longest one (what model.max_seq must hold to train on every conversation).
  int64_t tokens = 0, longest_tokens = 0;
  std::map<std::string, int64_t> turns_by_kind;
};
SftCorpusStats sft_corpus_stats(const std::vector<SftConversation>& conversations);

// Writes <dir>/train.jsonl, <dir>/validation.jsonl and <dir>/stats.json (creating dir).
void write_sft_corpus(const std::string& dir, const SftCorpus& corpus, const SftCorpusOptions& options);

// The one-screen summary: conversations and turns per split, bytes and tokens, the share of each
// kind of turn, the dropped conversations by kind and verdict, the held-out task ids.
std::string sft_corpus_summary(const SftCorpus& corpus);

}  // namespace turnrl
