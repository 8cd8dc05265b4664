#pragma once
// ChatCodec: the action codec of text and code actions. The first prompt is the chat template's
// rendering of the observation's messages; every later prompt is the previous turn's sequence
// (prompt and the tokens the policy generated, never re-tokenised) followed by the template's
// continuation with the environment's new messages (chat_tokenizer.h). Environments such as
// KernelEnv echo the policy's reply as an assistant message before their feedback; its tokens are
// already in the sequence, so the codec skips a leading assistant message among the new ones.
#include <cstdint>
#include <memory>
#include <vector>

#include "turnrl/model/chat_tokenizer.h"
#include "turnrl/rl/action_codec.h"

namespace turnrl {

class ChatCodec : public ActionCodec {
 public:
  // max_new_tokens: the response budget of one turn (SamplingOptions::max_new_tokens);
  // context_length: the policy's longest sequence (ChatPolicy::max_seq), 0 = no limit.
  ChatCodec(std::shared_ptr<const ChatTokenizer> tokenizer, int64_t max_new_tokens, int64_t context_length = 0);

  TokenIds prompt(const EpisodeTokens& so_far, const Observation& observation) const override;
  // The decoded response without special tokens (the stop token).
  std::string action_text(const TokenIds& response) const override;
  SamplingOptions sampling(const SamplingOptions& base) const override;
  // The last message's text (the task, or the environment's feedback).
  std::string observation_text(const Observation& observation) const override;
  int64_t context_length() const override { return context_length_; }

  const ChatTokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::shared_ptr<const ChatTokenizer> tokenizer_;
  int64_t max_new_tokens_;
  int64_t context_length_;
};

// A whole conversation as one token sequence, with the assistant's share marked.
struct ConversationTokens {
  TokenIds tokens;
  std::vector<uint8_t> assistant;  // per token: 1 on an assistant turn's text and its stop token, else 0
};

// The tokens an episode of `codec` holds after the policy has written every assistant message of
// `messages` (supervised fine-tuning trains on exactly what RL later scores): each assistant turn
// is prompted by codec.prompt() from the episode so far and the messages before it (the assistant
// message echoed, as KernelEnv does), and answered by encode(text) + the first stop token, as a
// response that stopped. Messages after the last assistant turn are not part of any episode and
// are left out. Throws turnrl::Error when there is no assistant message.
ConversationTokens conversation_tokens(const ChatCodec& codec, const std::vector<ChatMessage>& messages);

}  // namespace turnrl
