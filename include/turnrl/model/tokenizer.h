#pragma once
// Byte-level tokenizer with special tokens, and the chat/turn template that turns a multi-turn
// episode into one token sequence whose response mask covers only the policy's tokens.
//
// Ids 0..255 are the raw bytes of the text (any byte string round-trips exactly, UTF-8 or not).
// Ids from 256 up are special tokens, each a name like "<|user|>": the built-in ones below, then
// whatever a caller registers (the kernel environment adds its plan vocabulary this way).
//
// Template (one episode):
//   <|bos|> <|system|> text <|end_turn|> <|user|> text <|end_turn|> <|assistant|> text <|end_turn|> ...
// The response mask is true on the assistant's content and its closing <|end_turn|> (the policy
// produces those), false on <|bos|>, every role header and every non-assistant message. A rollout
// prompt is the episode so far followed by <|assistant|> (generation_prompt), and the policy
// stops on <|end_turn|>, so prompt + generated tokens is exactly the templated episode.
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace turnrl {

using TokenIds = std::vector<int64_t>;

class Tokenizer {
 public:
  static constexpr int64_t kNumBytes = 256;
  // The built-in special tokens, in id order from 256.
  static constexpr int64_t kBos = 256, kEos = 257, kPad = 258, kSystem = 259, kUser = 260, kAssistant = 261,
                           kEndTurn = 262;

  Tokenizer();

  // Registers a special token (e.g. "<|plan:tile|>") and returns its id; registering an existing
  // name returns its id. Throws when the name is empty. Names may share prefixes: parsing matches
  // the longest name.
  int64_t add_special_token(const std::string& name);
  // Id of a special token name; throws turnrl::Error naming the token when unknown.
  int64_t special_id(const std::string& name) const;
  bool is_special(int64_t id) const { return id >= kNumBytes && id < vocab_size(); }
  // 256 + number of special tokens: the embedding size a policy needs.
  int64_t vocab_size() const { return kNumBytes + int64_t(special_names_.size()); }

  // Bytes of `text`, one id each. Special-token names inside the text stay plain bytes, so text
  // from users or the environment can never inject a role header.
  TokenIds encode(std::string_view text) const;
  // Like encode, but every registered special-token name in the text becomes its id (longest
  // name wins where several match at one position).
  TokenIds encode_with_special(std::string_view text) const;
  // Bytes back to text; special ids become their names. Throws on an id outside the vocabulary.
  std::string decode(const TokenIds& ids) const;
  // Decoded text without special tokens (what a user would read).
  std::string decode_text(const TokenIds& ids) const;

 private:
  std::vector<std::string> special_names_;              // index = id - 256
  std::unordered_map<std::string, int64_t> special_ids_;
  size_t longest_special_ = 0;
  std::bitset<256> special_first_bytes_;  // bytes that can start a special name (fast path)
};

enum class Role { system, user, assistant };
const char* role_name(Role role);

// One message of an episode. When `tokens` is non-empty it is used verbatim instead of `text`:
// pass an assistant turn as the exact ids the policy generated (including its <|end_turn|> when it
// stopped, without it when it was truncated), so training sees the rollout's tokens, not a
// re-tokenisation. A text message gets <|end_turn|> appended.
struct Message {
  Role role = Role::user;
  std::string text;
  TokenIds tokens;

  static Message system(std::string text) { return {Role::system, std::move(text), {}}; }
  static Message user(std::string text) { return {Role::user, std::move(text), {}}; }
  static Message assistant(std::string text) { return {Role::assistant, std::move(text), {}}; }
  static Message assistant_tokens(TokenIds tokens) { return {Role::assistant, {}, std::move(tokens)}; }
};

// One templated episode: tokens and, per token, whether the policy produced it.
struct TemplatedEpisode {
  TokenIds tokens;
  std::vector<uint8_t> response_mask;  // 1 on the policy's tokens, same length as tokens
};

// The whole episode as one sequence (see the template at the top of this file).
TemplatedEpisode apply_chat_template(const Tokenizer& tokenizer, const std::vector<Message>& episode);
// The rollout prompt for the next assistant turn: the templated episode + <|assistant|>.
TokenIds generation_prompt(const Tokenizer& tokenizer, const std::vector<Message>& episode);

}  // namespace turnrl
