#pragma once
// ChatTokenizer: what a chat action codec needs from a tokenizer and its chat template, so that a
// multi-turn episode is built token-in/token-out. Each turn's prompt is the previous turn's prompt,
// plus the tokens the policy generated, plus continuation tokens (the closing of the assistant
// turn, the environment's new messages, the next generation prompt): history is never
// re-tokenised, so the trainer scores exactly the tokens the rollout sampled.
//
//   prompt(0)   = render_prompt(first messages)
//   prompt(k+1) = prompt(k) + generated(k) + render_continuation(new messages, stopped(k))
//
// Implementations: ByteChatTokenizer (the built-in byte tokenizer and its template, below) and
// the byte-level BPE tokenizers with HF chat templates (ChatML, Qwen3, Llama-3).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "turnrl/model/tokenizer.h"

namespace turnrl {

// One message of a conversation, as environments produce it and chat templates render it.
struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string text;
};

class ChatTokenizer {
 public:
  virtual ~ChatTokenizer() = default;

  // Embedding rows a policy needs (at least every id encode and the templates produce).
  virtual int64_t vocab_size() const = 0;
  // Plain text to ids. Special-token names inside the text are NOT parsed as special tokens, so
  // text from users or an environment can never inject a role header.
  virtual TokenIds encode(std::string_view text) const = 0;
  // Ids back to text; skip_special_tokens drops special/added control tokens (what a user reads).
  virtual std::string decode(const TokenIds& ids, bool skip_special_tokens = true) const = 0;

  // The conversation `messages` followed by the generation prompt of the assistant's next turn.
  virtual TokenIds render_prompt(const std::vector<ChatMessage>& messages) const = 0;
  // What follows an assistant turn the policy generated, so the sequence goes on with `messages`
  // (the environment's feedback) and the next generation prompt. stopped: the generated tokens
  // ended with one of stop_tokens(); when false (truncated) the continuation closes the turn first.
  // None of these tokens are the policy's (response mask false).
  virtual TokenIds render_continuation(const std::vector<ChatMessage>& messages, bool stopped) const = 0;
  // Tokens that end an assistant turn (generation stops after emitting one; it is part of the
  // response).
  virtual std::vector<int64_t> stop_tokens() const = 0;
  // The id written after a row has stopped (never attended to, masked everywhere).
  virtual int64_t pad_id() const = 0;
};

// The built-in byte tokenizer (tokenizer.h) with its template. Owns a copy of the tokenizer, so
// special tokens registered on it before wrapping (e.g. a plan vocabulary) are kept.
class ByteChatTokenizer : public ChatTokenizer {
 public:
  explicit ByteChatTokenizer(Tokenizer tokenizer = Tokenizer()) : tokenizer_(std::move(tokenizer)) {}

  int64_t vocab_size() const override { return tokenizer_.vocab_size(); }
  TokenIds encode(std::string_view text) const override { return tokenizer_.encode(text); }
  std::string decode(const TokenIds& ids, bool skip_special_tokens = true) const override;
  TokenIds render_prompt(const std::vector<ChatMessage>& messages) const override;
  TokenIds render_continuation(const std::vector<ChatMessage>& messages, bool stopped) const override;
  std::vector<int64_t> stop_tokens() const override { return {Tokenizer::kEndTurn}; }
  int64_t pad_id() const override { return Tokenizer::kPad; }

  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  Tokenizer tokenizer_;
};

// "system" / "user" / "assistant" -> Role; throws turnrl::Error naming the role and the allowed ones.
Role parse_role(const std::string& role);

}  // namespace turnrl
