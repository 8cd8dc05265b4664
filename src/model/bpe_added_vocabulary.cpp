#include "bpe_added_vocabulary.h"

#include <algorithm>

#include <unicode/uchar.h>

#include "../core/utf8.h"

namespace turnrl::detail {

namespace {

// The code point that ends at `end` (exclusive) and its start, or none at the text's start.
bool previous_char(std::string_view text, size_t end, char32_t& c, size_t& start) {
  if (end == 0) return false;
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  c = utf8_decode_at(text, start, end - start);
  return true;
}

bool next_char(std::string_view text, size_t begin, char32_t& c, size_t& length) {
  if (begin >= text.size()) return false;
  length = utf8_sequence_length(text, begin);
  c = utf8_decode_at(text, begin, length);
  return true;
}

// Rust's char::is_alphanumeric (Alphabetic or Numeric) or '_': HF's word characters for single_word.
bool is_word_char(char32_t c) {
  const int8_t type = u_charType(UChar32(c));
  return c == '_' || u_hasBinaryProperty(UChar32(c), UCHAR_ALPHABETIC) || type == U_DECIMAL_DIGIT_NUMBER ||
         type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

}  // namespace

BpeAddedVocabulary::BpeAddedVocabulary(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].content.empty()) by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  for (auto& bucket : by_first_byte_)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](size_t a, size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

std::vector<BpeAddedVocabulary::Segment> BpeAddedVocabulary::split(std::string_view text, bool normalized_tokens,
                                                                   bool parse_special) const {
  std::vector<Segment> segments;
  size_t plain_begin = 0;  // start of the pending plain text
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* found = nullptr;
    for (const size_t index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& t = tokens_[index];
      if (t.normalized != normalized_tokens || (t.special && !parse_special)) continue;
      if (text.compare(pos, t.content.size(), t.content) == 0) {
        found = &t;  // the longest candidate at the leftmost position
        break;
      }
    }
    size_t begin = pos, end = found ? pos + found->content.size() : pos;
    char32_t c;
    size_t at, length;
    if (found && found->single_word) {
      const bool word_before = previous_char(text, begin, c, at) && is_word_char(c);
      const bool word_after = next_char(text, end, c, length) && is_word_char(c);
      if (word_before || word_after) found = nullptr;
    }
    if (!found) {
      pos += std::max<size_t>(1, utf8_sequence_length(text, pos));
      continue;
    }
    if (found->lstrip)
      while (begin > plain_begin && previous_char(text, begin, c, at) && is_unicode_white_space(c)) begin = at;
    if (found->rstrip)
      while (next_char(text, end, c, length) && is_unicode_white_space(c)) end += length;
    if (begin > plain_begin) segments.push_back({plain_begin, begin, -1});
    segments.push_back({begin, end, found->id});
    plain_begin = pos = end;
  }
  if (plain_begin < text.size()) segments.push_back({plain_begin, text.size(), -1});
  return segments;
}

}  // namespace turnrl::detail
