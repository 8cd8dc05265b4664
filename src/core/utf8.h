#pragma once
// UTF-8 helpers (internal): the BPE tokenizer and chat templates, and JSON writers that must emit
// valid UTF-8 whatever bytes a policy produced.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace turnrl::detail {

// Length in bytes of the well-formed UTF-8 sequence starting at text[pos], 0 when it is not one
// (truncated, overlong, a surrogate, above U+10FFFF, or a stray continuation byte).
size_t utf8_sequence_length(std::string_view text, size_t pos);
// Decodes the well-formed sequence of `length` bytes at text[pos].
char32_t utf8_decode_at(std::string_view text, size_t pos, size_t length);
void utf8_append(std::string& out, char32_t code_point);
// Byte offset of the first ill-formed sequence, or npos when `text` is valid UTF-8.
size_t utf8_first_invalid(std::string_view text);
// `bytes` with each maximal ill-formed subsequence replaced by U+FFFD (Unicode's "substitution of
// maximal subparts": what Rust's String::from_utf8_lossy, hence HF decode, does).
std::string utf8_lossy(std::string_view bytes);

// Unicode White_Space (Rust's char::is_whitespace: what HF's lstrip/rstrip strip).
bool is_unicode_white_space(char32_t c);
// Python's str.isspace (what Jinja's `trim` strips in HF chat templates): White_Space plus the
// information separators U+001C..U+001F.
bool is_python_space(char32_t c);

}  // namespace turnrl::detail
