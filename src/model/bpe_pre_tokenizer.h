#pragma once
// tokenizer.json's "pre_tokenizer": a Split (regex or string; behavior; invert), a ByteLevel
// (add_prefix_space, use_regex with GPT-2's regex), or a Sequence of them; it must contain a
// ByteLevel step, since the model's vocabulary is written in the byte-level alphabet. Regexes run
// on PCRE2 with UTF + UCP, so \p{L}, \p{N} and \s mean what they mean in Oniguruma, which HF
// `tokenizers` uses (internal).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bpe_json.h"

namespace turnrl::detail {

// A compiled PCRE2 pattern (JIT where available) and its non-empty matches.
class BpeRegex {
 public:
  // pattern: PCRE2 syntax, or a literal string when `literal`; where: the JSON path for errors.
  BpeRegex(const std::string& pattern, bool literal, const std::string& where);
  // [start, end) byte offsets of the successive non-empty matches in `text` (valid UTF-8).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  std::shared_ptr<void> code_;  // pcre2_code_8, freed by its deleter
};

class BpePreTokenizer {
 public:
  // Reads the "pre_tokenizer" node; unsupported types, behaviors or a missing ByteLevel step are
  // errors naming the JSON path.
  static BpePreTokenizer from_json(const JsonAt& node);
  // Appends the pieces of `text` (valid UTF-8) to `out`, each in the byte-level alphabet.
  void run(std::string_view text, std::vector<std::string>& out) const;

  enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
  struct Step {
    bool byte_level = false;
    // Split: the pattern, behavior and invert. ByteLevel: `regex` is GPT-2's when use_regex.
    std::shared_ptr<const BpeRegex> regex;
    Behavior behavior = Behavior::isolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel only
  };

 private:
  std::vector<Step> steps_;
};

}  // namespace turnrl::detail
