#include "turnrl/rl/chat_codec.h"

#include "turnrl/core/error.h"

namespace turnrl {

ChatCodec::ChatCodec(std::shared_ptr<const ChatTokenizer> tokenizer, int64_t max_new_tokens, int64_t context_length)
    : tokenizer_(std::move(tokenizer)), max_new_tokens_(max_new_tokens), context_length_(context_length) {
  if (!tokenizer_) fail("ChatCodec: the tokenizer is null");
  if (max_new_tokens_ < 1) fail("ChatCodec: max_new_tokens {} is out of range; allowed: >= 1", max_new_tokens_);
  if (context_length_ < 0) fail("ChatCodec: context_length {} is out of range; allowed: 0 (no limit) or >= 1", context_length_);
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

ConversationTokens conversation_tokens(const ChatCodec& codec, const std::vector<ChatMessage>& messages) {
  const ChatTokenizer& tokenizer = codec.tokenizer();
  const std::vector<int64_t> stops = tokenizer.stop_tokens();
  if (stops.empty()) fail("conversation_tokens: the tokenizer has no stop token to end an assistant turn");
  ConversationTokens out;
  EpisodeTokens so_far;
  Observation seen;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    seen.messages.assign(messages.begin(), messages.begin() + std::ptrdiff_t(i));
    const TokenIds prompt = codec.prompt(so_far, seen);
    TokenIds response = tokenizer.encode(messages[i].text);
    response.push_back(stops.front());
    out.assistant.resize(prompt.size(), 0);
    out.assistant.resize(prompt.size() + response.size(), 1);
    so_far = after_turn(prompt, response, seen, stops);
  }
  if (so_far.sequence.empty()) fail("conversation_tokens: the conversation has no assistant message to learn from");
  out.tokens = std::move(so_far.sequence);
  return out;
}

std::string ChatCodec::observation_text(const Observation& observation) const {
  return observation.messages.empty() ? std::string() : observation.messages.back().text;
}

}  // namespace turnrl
