#include "turnrl/model/tokenizer.h"

#include <algorithm>

#include "turnrl/core/error.h"

namespace turnrl {

Tokenizer::Tokenizer() {
  // Order fixes the ids kBos..kEndTurn declared in the header.
  for (const char* name : {"<|bos|>", "<|eos|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end_turn|>"})
    add_special_token(name);
}

int64_t Tokenizer::add_special_token(const std::string& name) {
  if (name.empty()) fail("tokenizer.add_special_token: empty name; a special token needs a non-empty name");
  if (auto it = special_ids_.find(name); it != special_ids_.end()) return it->second;
  const int64_t id = vocab_size();
  special_names_.push_back(name);
  special_ids_.emplace(name, id);
  longest_special_ = std::max(longest_special_, name.size());
  special_first_bytes_.set(static_cast<unsigned char>(name[0]));
  return id;
}

int64_t Tokenizer::special_id(const std::string& name) const {
  auto it = special_ids_.find(name);
  if (it == special_ids_.end()) fail("tokenizer: unknown special token '{}'; register it with add_special_token", name);
  return it->second;
}

TokenIds Tokenizer::encode(std::string_view text) const {
  TokenIds ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

TokenIds Tokenizer::encode_with_special(std::string_view text) const {
  TokenIds ids;
  ids.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    int64_t match = -1;
    size_t match_len = 0;
    if (special_first_bytes_[static_cast<unsigned char>(text[i])]) {
      for (size_t len = std::min(longest_special_, text.size() - i); len > 0; --len) {
        auto it = special_ids_.find(std::string(text.substr(i, len)));
        if (it != special_ids_.end()) {
          match = it->second;
          match_len = len;
          break;
        }
      }
    }
    if (match >= 0) {
      ids.push_back(match);
      i += match_len;
    } else {
      ids.push_back(static_cast<unsigned char>(text[i]));
      ++i;
    }
  }
  return ids;
}

namespace {

std::string decode_impl(const Tokenizer& tok, const std::vector<std::string>& names, const TokenIds& ids,
                        bool with_special) {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    if (id >= 0 && id < Tokenizer::kNumBytes) {
      out.push_back(static_cast<char>(id));
    } else if (tok.is_special(id)) {
      if (with_special) out += names[size_t(id - Tokenizer::kNumBytes)];
    } else {
      fail("tokenizer.decode: token id {} is outside the vocabulary [0, {})", id, tok.vocab_size());
    }
  }
  return out;
}

}  // namespace

std::string Tokenizer::decode(const TokenIds& ids) const { return decode_impl(*this, special_names_, ids, true); }
std::string Tokenizer::decode_text(const TokenIds& ids) const { return decode_impl(*this, special_names_, ids, false); }

const char* role_name(Role role) {
  switch (role) {
    case Role::system: return "system";
    case Role::user: return "user";
    case Role::assistant: return "assistant";
  }
  return "?";
}

namespace {

int64_t role_header(Role role) {
  switch (role) {
    case Role::system: return Tokenizer::kSystem;
    case Role::user: return Tokenizer::kUser;
    case Role::assistant: return Tokenizer::kAssistant;
  }
  fail("chat template: unknown role {}", int(role));
}

void append(TemplatedEpisode& out, const TokenIds& ids, bool policy) {
  out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
  out.response_mask.insert(out.response_mask.end(), ids.size(), uint8_t(policy));
}

}  // namespace

TemplatedEpisode apply_chat_template(const Tokenizer& tokenizer, const std::vector<Message>& episode) {
  TemplatedEpisode out;
  append(out, {Tokenizer::kBos}, false);
  for (size_t i = 0; i < episode.size(); ++i) {
    const Message& m = episode[i];
    const bool policy = m.role == Role::assistant;
    append(out, {role_header(m.role)}, false);
    if (!m.tokens.empty()) {
      for (int64_t id : m.tokens)
        if (id < 0 || id >= tokenizer.vocab_size())
          fail("chat template: message {} ({}) has token id {} outside the vocabulary [0, {})", i,
               role_name(m.role), id, tokenizer.vocab_size());
      append(out, m.tokens, policy);
    } else {
      append(out, tokenizer.encode(m.text), policy);
      append(out, {Tokenizer::kEndTurn}, policy);
    }
  }
  return out;
}

TokenIds generation_prompt(const Tokenizer& tokenizer, const std::vector<Message>& episode) {
  TokenIds ids = apply_chat_template(tokenizer, episode).tokens;
  ids.push_back(Tokenizer::kAssistant);
  return ids;
}

}  // namespace turnrl
