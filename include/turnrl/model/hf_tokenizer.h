#pragma once
// A HuggingFace model folder's tokenizer as a ChatTokenizer: tokenizer.json (byte-level BPE),
// tokenizer_config.json (chat template, eos/pad tokens) and, when present, generation_config.json
// (eos_token_id) and config.json (model_type, the fallback for folders without a chat template).
//
//   auto tok = turnrl::load_chat_tokenizer("/models/Qwen3-8B-Base");   // std::shared_ptr<ChatTokenizer>
//   TokenIds prompt = tok->render_prompt({{"user", "Write a ReLU kernel."}});
#include <memory>
#include <string>
#include <vector>

#include "turnrl/model/bpe_tokenizer.h"
#include "turnrl/model/chat_template.h"
#include "turnrl/model/chat_tokenizer.h"

namespace turnrl {

struct HfTokenizerOptions {
  // "auto": recognised from tokenizer_config.json's chat_template text, else from config.json's
  // model_type (qwen2 -> chatml, qwen3 -> qwen3, llama -> llama3); or one of chatml, qwen3, llama3.
  std::string chat_template = "auto";

  HfTokenizerOptions& template_name(std::string v) { chat_template = std::move(v); return *this; }
};

class HfChatTokenizer : public ChatTokenizer {
 public:
  // stop_tokens: ids that end an assistant turn; pad: the id written after a row stopped.
  HfChatTokenizer(BpeTokenizer tokenizer, ChatTemplate chat_template, std::vector<int64_t> stop_tokens, int64_t pad);

  int64_t vocab_size() const override { return tokenizer_.vocab_size(); }
  TokenIds encode(std::string_view text) const override { return tokenizer_.encode(text, /*parse_special=*/false); }
  std::string decode(const TokenIds& ids, bool skip_special_tokens = true) const override {
    return tokenizer_.decode(ids, skip_special_tokens);
  }
  TokenIds render_prompt(const std::vector<ChatMessage>& messages) const override;
  TokenIds render_continuation(const std::vector<ChatMessage>& messages, bool stopped) const override;
  std::vector<int64_t> stop_tokens() const override { return stop_tokens_; }
  int64_t pad_id() const override { return pad_; }

  // Ids of a rendering: each text run encoded whole (special names inside it stay text), each
  // special piece its id.
  TokenIds encode_pieces(const ChatPieces& pieces) const;
  const BpeTokenizer& tokenizer() const { return tokenizer_; }
  ChatTemplate chat_template() const { return template_; }

 private:
  BpeTokenizer tokenizer_;
  ChatTemplate template_;
  std::vector<int64_t> stop_tokens_;
  int64_t pad_;
};

// Loads a model folder's tokenizer (see the top of this file). Stop tokens: the template's
// end-of-turn token, tokenizer_config's eos_token, generation_config's eos_token_id(s), and the
// family's end-of-text tokens (<|endoftext|>; <|end_of_text|>, <|eom_id|>) where the vocabulary
// has them. pad: pad_token, else eos_token. Errors name the file, the key and the value; an
// unrecognised template names the options.
std::shared_ptr<HfChatTokenizer> load_hf_chat_tokenizer(const std::string& dir, const HfTokenizerOptions& options = {});
// The same as the ChatTokenizer seam, for the generic trainer's chat codec.
std::shared_ptr<ChatTokenizer> load_chat_tokenizer(const std::string& dir, const HfTokenizerOptions& options = {});

}  // namespace turnrl
