#include "turnrl/model/chat_tokenizer.h"

#include "turnrl/core/error.h"

namespace turnrl {

Role parse_role(const std::string& role) {
  if (role == "system") return Role::system;
  if (role == "user") return Role::user;
  if (role == "assistant") return Role::assistant;
  fail("chat message role '{}' is not one of system, user, assistant", role);
}

std::string ByteChatTokenizer::decode(const TokenIds& ids, bool skip_special_tokens) const {
  return skip_special_tokens ? tokenizer_.decode_text(ids) : tokenizer_.decode(ids);
}

namespace {

std::vector<Message> to_messages(const std::vector<ChatMessage>& messages) {
  std::vector<Message> out;
  out.reserve(messages.size());
  for (const ChatMessage& m : messages) out.push_back({parse_role(m.role), m.text, {}});
  return out;
}

}  // namespace

TokenIds ByteChatTokenizer::render_prompt(const std::vector<ChatMessage>& messages) const {
  return generation_prompt(tokenizer_, to_messages(messages));
}

TokenIds ByteChatTokenizer::render_continuation(const std::vector<ChatMessage>& messages, bool stopped) const {
  // apply_chat_template starts every episode with <|bos|>; a continuation is the same template
  // without it, so prompt + generated + continuation equals the template of the whole episode.
  TokenIds ids;
  if (!stopped) ids.push_back(Tokenizer::kEndTurn);
  const TokenIds rest = generation_prompt(tokenizer_, to_messages(messages));
  ids.insert(ids.end(), rest.begin() + 1, rest.end());
  return ids;
}

}  // namespace turnrl
