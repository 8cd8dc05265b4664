#include "turnrl/model/hf_tokenizer.h"

#include <algorithm>
#include <fstream>

#include "bpe_json.h"
#include "turnrl/core/filesystem.h"

namespace turnrl {

using detail::JsonAt;

HfChatTokenizer::HfChatTokenizer(BpeTokenizer tokenizer, ChatTemplate chat_template, std::vector<int64_t> stop_tokens,
                                 int64_t pad)
    : tokenizer_(std::move(tokenizer)), template_(chat_template), stop_tokens_(std::move(stop_tokens)), pad_(pad) {
  for (const std::string& name : template_special_tokens(template_))
    if (!tokenizer_.token_to_id(name))
      fail("chat template {}: the tokenizer has no token '{}' (a different model family? choose the template with "
           "HfTokenizerOptions::chat_template: chatml, qwen3, llama3)",
           chat_template_name(template_), name);
  if (stop_tokens_.empty()) fail("HfChatTokenizer: no stop tokens");
  for (const int64_t id : stop_tokens_)
    if (id < 0 || id >= tokenizer_.vocab_size()) fail("HfChatTokenizer: stop token {} is outside the vocabulary", id);
  if (pad_ < 0 || pad_ >= tokenizer_.vocab_size()) fail("HfChatTokenizer: pad id {} is outside the vocabulary", pad_);
}

TokenIds HfChatTokenizer::encode_pieces(const ChatPieces& pieces) const {
  TokenIds ids;
  for (const ChatPiece& p : pieces) {
    if (p.special) {
      ids.push_back(*tokenizer_.token_to_id(p.text));  // present: checked in the constructor
    } else {
      const TokenIds text = tokenizer_.encode(p.text, /*parse_special=*/false);
      ids.insert(ids.end(), text.begin(), text.end());
    }
  }
  return ids;
}

TokenIds HfChatTokenizer::render_prompt(const std::vector<ChatMessage>& messages) const {
  return encode_pieces(render_chat(template_, messages, /*add_generation_prompt=*/true));
}

TokenIds HfChatTokenizer::render_continuation(const std::vector<ChatMessage>& messages, bool stopped) const {
  return encode_pieces(render_chat_continuation(template_, messages, stopped));
}

namespace {

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

nlohmann::json read_json_file(const std::string& path) { return detail::parse_json(read_file(path, "the tokenizer file"), path); }

// A special token entry of tokenizer_config.json: a string, {"content": ...} (an AddedToken), or null.
std::optional<std::string> token_name(const JsonAt& config, const char* key) {
  if (!config.has(key)) return std::nullopt;
  const JsonAt node = config[key];
  if (node.node.is_object()) return node.required("content").string();
  return node.string();
}

int64_t token_id(const BpeTokenizer& tok, const JsonAt& config, const char* key, const std::string& name) {
  const auto id = tok.token_to_id(name);
  if (!id) fail("{}: token '{}' is not in the tokenizer's vocabulary", config[key].where(), name);
  return *id;
}

// The template's Jinja text: a string, or a list of {"name", "template"} of which "default" counts.
std::optional<std::string> template_text(const JsonAt& config) {
  if (!config.has("chat_template")) return std::nullopt;
  const JsonAt node = config["chat_template"];
  if (node.node.is_string()) return node.string();
  node.expect_array();
  for (size_t i = 0; i < node.node.size(); ++i)
    if (node[i].required("name").string() == "default") return node[i].required("template").string();
  fail("{}: no entry named 'default'", node.where());
}

ChatTemplate choose_template(const std::string& dir, const JsonAt& config, const HfTokenizerOptions& options) {
  if (options.chat_template != "auto") return parse_chat_template(options.chat_template);
  if (const auto text = template_text(config)) {
    if (const auto found = detect_chat_template(*text)) return *found;
    fail("{}: chat_template is none of the templates turnrl reproduces (chatml: Qwen2.5, qwen3: Qwen3, llama3: "
         "Llama-3); set HfTokenizerOptions::chat_template to chatml, qwen3 or llama3",
         config["chat_template"].where());
  }
  const std::string config_path = dir + "/config.json";
  if (file_exists(config_path)) {
    const nlohmann::json model_config = read_json_file(config_path);
    const JsonAt root{model_config, config_path, ""};
    if (root.has("model_type")) {
      const std::string type = root["model_type"].string();
      if (type == "qwen2") return ChatTemplate::chatml;
      if (type == "qwen3") return ChatTemplate::qwen3;
      if (type == "llama") return ChatTemplate::llama3;
    }
  }
  fail("{}: no chat_template, and config.json's model_type names no known family; set "
       "HfTokenizerOptions::chat_template to chatml, qwen3 or llama3",
       config.source);
}

void add_unique(std::vector<int64_t>& ids, int64_t id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

}  // namespace

std::shared_ptr<HfChatTokenizer> load_hf_chat_tokenizer(const std::string& dir, const HfTokenizerOptions& options) {
  const std::string config_path = dir + "/tokenizer_config.json";
  const nlohmann::json config_doc = read_json_file(config_path);
  const JsonAt config{config_doc, config_path, ""};
  try {
    // The template first: a folder turnrl cannot render fails before the large tokenizer.json is read.
    const ChatTemplate chat_template = choose_template(dir, config, options);
    BpeTokenizer tok = BpeTokenizer::from_file(dir + "/tokenizer.json");

    // (A vocabulary without the template's tokens is refused by the constructor, naming the token.)
    std::vector<int64_t> stop;
    if (const auto end_of_turn = tok.token_to_id(end_of_turn_token(chat_template))) add_unique(stop, *end_of_turn);
    const auto eos = token_name(config, "eos_token");
    if (eos) add_unique(stop, token_id(tok, config, "eos_token", *eos));
    const std::string generation_path = dir + "/generation_config.json";
    if (file_exists(generation_path)) {
      const nlohmann::json generation_doc = read_json_file(generation_path);
      const JsonAt generation{generation_doc, generation_path, ""};
      if (generation.has("eos_token_id")) {
        const JsonAt ids = generation["eos_token_id"];
        if (ids.node.is_array()) {
          for (size_t i = 0; i < ids.node.size(); ++i) add_unique(stop, ids[i].integer());
        } else {
          add_unique(stop, ids.integer());
        }
      }
    }
    // The family's end-of-text tokens: a base model often ends a turn with them instead.
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "<|eom_id|>"})
      if (const auto id = tok.token_to_id(name)) add_unique(stop, *id);

    int64_t pad = stop.front();
    if (const auto name = token_name(config, "pad_token")) pad = token_id(tok, config, "pad_token", *name);
    else if (eos) pad = token_id(tok, config, "eos_token", *eos);
    return std::make_shared<HfChatTokenizer>(std::move(tok), chat_template, std::move(stop), pad);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected structure: {}", config_path, e.what());
  }
}

std::shared_ptr<ChatTokenizer> load_chat_tokenizer(const std::string& dir, const HfTokenizerOptions& options) {
  return load_hf_chat_tokenizer(dir, options);
}

}  // namespace turnrl
