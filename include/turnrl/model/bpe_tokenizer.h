#pragma once
// BpeTokenizer: a HuggingFace `tokenizer.json` of the byte-level BPE kind (Qwen2, Qwen2.5, Qwen3,
// Llama-3, the GPT-2 family), run as the `tokenizers` library runs it:
//
//   text -> added tokens split out (leftmost-longest; lstrip / rstrip / single_word as the file says)
//        -> normalizer on the rest (NFC, NFD, NFKC, NFKD or a Sequence of them; none)
//        -> pre-tokenizer (Sequence of Split(regex or string, behavior, invert) and ByteLevel)
//        -> BPE model on each piece (merge ranks; ignore_merges) -> ids
//   ids  -> ByteLevel decoder (added tokens verbatim; invalid UTF-8 becomes U+FFFD, as in HF)
//
// encode() never adds a BOS/EOS (HF's add_special_tokens=False: the post-processor is not run).
// Anything else in the file (a Unigram/WordPiece model, byte_fallback, another pre-tokenizer or
// normalizer) is refused with a turnrl::Error naming the JSON path and the value.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "turnrl/model/tokenizer.h"  // TokenIds

namespace turnrl {

// One entry of tokenizer.json's "added_tokens".
struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool special = false;      // dropped by decode(skip_special_tokens); matched only when encode parses specials
  bool normalized = false;   // matched in the normalized text (else in the raw text)
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // matches only when not inside a word
};

class BpeTokenizer {
 public:
  // Reads a tokenizer.json file; errors name the file and the JSON path.
  static BpeTokenizer from_file(const std::string& path);
  // The same from the file's text; `source` names it in errors.
  static BpeTokenizer from_json(std::string_view json_text, const std::string& source = "tokenizer.json");

  // Text to ids. parse_special: special added tokens written in the text become their ids (HF's
  // default, split_special_tokens=False); when false their names are ordinary text (HF's
  // split_special_tokens=True), so user text cannot inject a role header. Non-special added
  // tokens (Qwen3's <think>, <tool_call>) are always matched, as in HF. Throws on invalid UTF-8.
  TokenIds encode(std::string_view text, bool parse_special = false) const;
  // Ids to text (HF `tokenizers` decode, without transformers' clean_up_tokenization_spaces).
  // Ids that name no token (a model's embedding rows past the tokenizer) decode to nothing, as in
  // HF; a negative id throws.
  std::string decode(const TokenIds& ids, bool skip_special_tokens = false) const;

  // The pre-tokenizer's pieces of `text` (normalized, byte-level mapped), as HF's
  // pre_tokenizer.pre_tokenize_str gives them; no added-token splitting.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  // One more than the largest id (model vocabulary and added tokens).
  int64_t vocab_size() const;
  // Id of a vocabulary entry or added token, if any.
  std::optional<int64_t> token_to_id(std::string_view token) const;
  // The vocabulary string (byte-level alphabet) or added token content of an id; throws when unknown.
  const std::string& id_to_token(int64_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  bool is_special(int64_t id) const;

  struct Impl;

 private:
  explicit BpeTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable after loading: copies share it, encode is thread-safe
};

}  // namespace turnrl
