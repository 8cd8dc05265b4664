#pragma once
// tokenizer.json's "normalizer": null, one of the Unicode normalization forms, or a Sequence of
// them; applied with ICU (Debian's libicu), whose Unicode version matches the Rust crate HF
// `tokenizers` uses closely enough for the scripts in use (internal).
#include <string>
#include <string_view>
#include <vector>

#include "bpe_json.h"

namespace turnrl::detail {

class BpeNormalizer {
 public:
  enum class Form { nfc, nfd, nfkc, nfkd };

  BpeNormalizer() = default;  // no normalization
  // Reads the "normalizer" node (null allowed); other normalizer types are an error naming the path.
  static BpeNormalizer from_json(const JsonAt& node);

  bool is_identity() const { return forms_.empty(); }
  std::string apply(std::string_view text) const;  // `text` must be valid UTF-8

 private:
  std::vector<Form> forms_;  // applied in order
};

}  // namespace turnrl::detail
