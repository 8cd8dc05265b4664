#include "turnrl/rl/action_codec.h"

#include <algorithm>

namespace turnrl {

EpisodeTokens after_turn(const TokenIds& prompt, const TokenIds& response, const Observation& answered,
                         const std::vector<int64_t>& stop_tokens) {
  EpisodeTokens out;
  out.sequence = prompt;
  out.sequence.insert(out.sequence.end(), response.begin(), response.end());
  out.messages_seen = answered.messages.size();
  out.stopped = !response.empty() &&
                std::find(stop_tokens.begin(), stop_tokens.end(), response.back()) != stop_tokens.end();
  return out;
}

}  // namespace turnrl
