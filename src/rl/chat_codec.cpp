#include "turnrl/rl/chat_codec.h"

#include "turnrl/core/error.h"

namespace turnrl {

ChatCodec::ChatCodec(std::shared_ptr<const ChatTokenizer> tokenizer, int64_t max_new_tokens)
    : tokenizer_(std::move(tokenizer)), max_new_tokens_(max_new_tokens) {
  if (!tokenizer_) fail("ChatCodec: the tokenizer is null");
  if (max_new_tokens_ < 1) fail("ChatCodec: max_new_tokens {} is out of range; allowed: >= 1", max_new_tokens_);
}

TokenIds ChatCodec::prompt(const EpisodeTokens& so_far, const Observation& observation) const {
  if (so_far.sequence.empty()) return tokenizer_->render_prompt(observation.messages);
  if (so_far.messages_seen > observation.messages.size())
    fail("ChatCodec: the observation holds {} messages, fewer than the {} already in the episode; environments may "
         "only append messages",
         observation.messages.size(), so_far.messages_seen);
  auto first = observation.messages.begin() + std::ptrdiff_t(so_far.messages_seen);
  if (first != observation.messages.end() && first->role == "assistant") ++first;  // the policy's own reply
  TokenIds out = so_far.sequence;
  const TokenIds more = tokenizer_->render_continuation({first, observation.messages.end()}, so_far.stopped);
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

std::string ChatCodec::action_text(const TokenIds& response) const { return tokenizer_->decode(response, true); }

SamplingOptions ChatCodec::sampling(const SamplingOptions& base) const {
  SamplingOptions out = base;
  return out.stop(tokenizer_->stop_tokens()).pad(tokenizer_->pad_id()).max_new(max_new_tokens_);
}

std::string ChatCodec::observation_text(const Observation& observation) const {
  return observation.messages.empty() ? std::string() : observation.messages.back().text;
}

}  // namespace turnrl
