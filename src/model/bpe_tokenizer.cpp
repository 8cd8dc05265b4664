#include "turnrl/model/bpe_tokenizer.h"

#include <unordered_map>

#include "bpe_added_vocabulary.h"
#include "bpe_byte_level.h"
#include "bpe_json.h"
#include "bpe_model.h"
#include "bpe_normalizer.h"
#include "bpe_pre_tokenizer.h"
#include "../core/utf8.h"
#include "turnrl/core/filesystem.h"

namespace turnrl {

using detail::JsonAt;

struct BpeTokenizer::Impl {
  detail::BpeNormalizer normalizer;
  detail::BpePreTokenizer pre_tokenizer;
  detail::BpeModel model;
  std::vector<AddedToken> added_tokens;
  detail::BpeAddedVocabulary added_vocabulary;
  std::unordered_map<int64_t, size_t> added_by_id;  // id -> index into added_tokens
  std::unordered_map<std::string, int64_t> added_by_content;
  int64_t vocab_size = 0;

  const std::string* token_of(int64_t id) const {
    const auto added = added_by_id.find(id);
    return added != added_by_id.end() ? &added_tokens[added->second].content : model.token_of(id);
  }
};

namespace {

void check_decoder(const JsonAt& root) {
  const JsonAt decoder = root.optional("decoder");
  if (decoder.node.is_null()) fail("{}: no decoder; byte-level BPE needs the ByteLevel decoder", decoder.where());
  const std::string type = decoder.required("type").string();
  if (type != "ByteLevel")
    fail("{}: decoder '{}' is not supported; supported: ByteLevel", decoder["type"].where(), type);
}

std::vector<AddedToken> read_added_tokens(const JsonAt& root) {
  std::vector<AddedToken> tokens;
  if (!root.has("added_tokens")) return tokens;
  const JsonAt list = root["added_tokens"];
  list.expect_array();
  for (size_t i = 0; i < list.node.size(); ++i) {
    const JsonAt entry = list[i];
    AddedToken t;
    t.id = entry.required("id").integer();
    t.content = entry.required("content").string();
    if (t.id < 0) fail("{}: negative id {}", entry["id"].where(), t.id);
    if (t.content.empty()) fail("{}: empty content", entry["content"].where());
    t.special = entry.flag("special", false);
    t.normalized = entry.flag("normalized", !t.special);  // HF's default: special tokens are matched raw
    t.lstrip = entry.flag("lstrip", false);
    t.rstrip = entry.flag("rstrip", false);
    t.single_word = entry.flag("single_word", false);
    tokens.push_back(std::move(t));
  }
  return tokens;
}

}  // namespace

BpeTokenizer BpeTokenizer::from_file(const std::string& path) { return from_json(read_file(path, "the tokenizer file"), path); }

BpeTokenizer BpeTokenizer::from_json(std::string_view json_text, const std::string& source) {
  const nlohmann::json doc = detail::parse_json(json_text, source);
  const JsonAt root{doc, source, ""};
  if (!doc.is_object()) fail("{}: expected a JSON object at the top level", source);
  auto impl = std::make_shared<Impl>();
  try {
    impl->model = detail::BpeModel::from_json(root.required("model"));
    impl->normalizer = detail::BpeNormalizer::from_json(root.optional("normalizer"));
    impl->pre_tokenizer = detail::BpePreTokenizer::from_json(root.optional("pre_tokenizer"));
    check_decoder(root);
    impl->added_tokens = read_added_tokens(root);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected structure: {}", source, e.what());
  }
  impl->vocab_size = impl->model.size();
  for (size_t i = 0; i < impl->added_tokens.size(); ++i) {
    const AddedToken& t = impl->added_tokens[i];
    impl->added_by_id[t.id] = i;
    impl->added_by_content[t.content] = t.id;
    impl->vocab_size = std::max(impl->vocab_size, t.id + 1);
  }
  impl->added_vocabulary = detail::BpeAddedVocabulary(impl->added_tokens);
  return BpeTokenizer(std::move(impl));
}

namespace {

void require_utf8(std::string_view text) {
  const size_t bad = detail::utf8_first_invalid(text);
  if (bad != std::string_view::npos)
    fail("tokenizer: the text is not valid UTF-8 (byte 0x{:02x} at offset {})", static_cast<unsigned char>(text[bad]), bad);
}

}  // namespace

TokenIds BpeTokenizer::encode(std::string_view text, bool parse_special) const {
  require_utf8(text);
  TokenIds ids;
  std::vector<std::string> pieces;
  const auto encode_plain = [&](std::string_view plain) {
    pieces.clear();
    impl_->pre_tokenizer.run(plain, pieces);
    for (const std::string& piece : pieces) impl_->model.encode_piece(piece, ids);
  };
  // Added tokens matched on the raw text first, then (inside what is left, once normalized) those
  // matched on the normalized text: HF's AddedVocabulary::extract_and_normalize.
  for (const auto& raw : impl_->added_vocabulary.split(text, false, parse_special)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string_view raw_text = text.substr(raw.begin, raw.end - raw.begin);
    const std::string normalized = impl_->normalizer.is_identity() ? std::string() : impl_->normalizer.apply(raw_text);
    const std::string_view view = impl_->normalizer.is_identity() ? raw_text : std::string_view(normalized);
    for (const auto& part : impl_->added_vocabulary.split(view, true, parse_special)) {
      if (part.id >= 0) ids.push_back(part.id);
      else encode_plain(view.substr(part.begin, part.end - part.begin));
    }
  }
  return ids;
}

std::string BpeTokenizer::decode(const TokenIds& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int64_t id : ids) {
    if (id < 0) fail("tokenizer: cannot decode the negative id {}", id);
    const std::string* token = impl_->token_of(id);
    // Ids naming no token (a model's embedding rows past the tokenizer, e.g. Qwen3's 151669..151935)
    // decode to nothing, as in HF.
    if (!token || (skip_special_tokens && is_special(id))) continue;
    // A token whose characters are not all byte symbols (an added token written in plain
    // Unicode) contributes its own UTF-8 bytes: HF's ByteLevel decoder does the same.
    if (!detail::byte_level_decode(*token, bytes)) bytes += *token;
  }
  return detail::utf8_lossy(bytes);
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  require_utf8(text);
  std::vector<std::string> pieces;
  impl_->pre_tokenizer.run(impl_->normalizer.is_identity() ? std::string(text) : impl_->normalizer.apply(text), pieces);
  return pieces;
}

int64_t BpeTokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int64_t> BpeTokenizer::token_to_id(std::string_view token) const {
  const auto added = impl_->added_by_content.find(std::string(token));
  if (added != impl_->added_by_content.end()) return added->second;
  return impl_->model.token_to_id(token);
}

const std::string& BpeTokenizer::id_to_token(int64_t id) const {
  const std::string* token = impl_->token_of(id);
  if (!token) fail("tokenizer: id {} is not in the vocabulary (size {})", id, vocab_size());
  return *token;
}

const std::vector<AddedToken>& BpeTokenizer::added_tokens() const { return impl_->added_tokens; }

bool BpeTokenizer::is_special(int64_t id) const {
  const auto added = impl_->added_by_id.find(id);
  return added != impl_->added_by_id.end() && impl_->added_tokens[added->second].special;
}

}  // namespace turnrl
