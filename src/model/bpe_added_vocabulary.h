#pragma once
// Splitting added tokens (tokenizer.json's "added_tokens") out of text before the normalizer and
// the BPE model see it, as HF's AddedVocabulary does: leftmost-longest match, single_word,
// lstrip / rstrip (internal).
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "turnrl/model/bpe_tokenizer.h"

namespace turnrl::detail {

class BpeAddedVocabulary {
 public:
  BpeAddedVocabulary() = default;
  explicit BpeAddedVocabulary(const std::vector<AddedToken>& tokens);

  // A part of the text: an added token's id, or plain text (id < 0) for the next stages.
  struct Segment {
    size_t begin, end;  // byte offsets into the text
    int64_t id;
  };
  // Splits `text` (valid UTF-8) at the added tokens whose `normalized` flag equals
  // `normalized_tokens` (HF matches those on the normalized text, the others on the raw text).
  // Special tokens are only matched when parse_special. Empty plain segments are dropped.
  std::vector<Segment> split(std::string_view text, bool normalized_tokens, bool parse_special) const;

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<size_t>, 256> by_first_byte_;  // indices into tokens_, longest content first
};

}  // namespace turnrl::detail
