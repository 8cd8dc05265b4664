#pragma once
// ActionCodec: between an environment's observations, a policy's tokens and the environment's
// Actions. The rollout asks the codec for each live episode's prompt, samples the responses with
// Policy::generate, and turns each response back into an Action. Two codecs ship with turnrl:
//   ChatCodec        (chat_codec.h)    a ChatTokenizer and its template; text and code actions,
//                                      token-in/token-out across turns
//   PlanActionCodec  (plan_actions.h)  kernel plans for a small policy that reads compact states
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "turnrl/rl/environment.h"
#include "turnrl/model/sampler.h"
#include "turnrl/model/tokenizer.h"

namespace turnrl {

// What an episode has put into its token sequence so far (kept by the rollout, one per episode).
struct EpisodeTokens {
  TokenIds sequence;         // the previous turn's prompt and response, no padding; empty before turn 0
  size_t messages_seen = 0;  // messages of the observation that `sequence` answered
  bool stopped = true;       // the previous response ended with one of the sampling stop tokens
};

class ActionCodec {
 public:
  virtual ~ActionCodec() = default;

  // The prompt of an episode's next turn (no padding): from the episode's tokens so far and the
  // observation the environment returned.
  virtual TokenIds prompt(const EpisodeTokens& so_far, const Observation& observation) const = 0;
  // The Action text of a response: `response` is the generated tokens, stop token included, no pads.
  virtual std::string action_text(const TokenIds& response) const = 0;
  // The sampling options of a turn: `base` (temperature, top-k, top-p, ...) plus what the format
  // needs (stop tokens, pad id, token budget).
  virtual SamplingOptions sampling(const SamplingOptions& base) const = 0;
  // What a transcript (samples.jsonl) shows of an observation.
  virtual std::string observation_text(const Observation& observation) const = 0;
  // The longest sequence (prompt and response) the policy takes, 0 = no limit. The rollout ends an
  // episode, marked truncated, when its next prompt leaves no room for a response, and clips a
  // turn's token budget to the room its longest prompt leaves (verl's max_model_len).
  virtual int64_t context_length() const { return 0; }
};

// The episode's tokens after a turn: the turn's whole sequence (prompt then response) and whether
// the response ended with one of `stop_tokens`.
EpisodeTokens after_turn(const TokenIds& prompt, const TokenIds& response, const Observation& answered,
                         const std::vector<int64_t>& stop_tokens);

}  // namespace turnrl
