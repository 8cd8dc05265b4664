#pragma once
// GPT-2's byte <-> unicode mapping that byte-level BPE vocabularies are written in: every byte
// gets a printable code point (printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100..U+0143), so any byte string is a string of vocabulary symbols (internal).
#include <array>
#include <string>
#include <string_view>

namespace turnrl::detail {

// The UTF-8 encoding of byte b's symbol.
const std::array<std::string, 256>& byte_level_symbols();
// Appends the symbols of `bytes` to `out`.
void byte_level_encode(std::string_view bytes, std::string& out);
// Appends to `out` the bytes that `token`'s symbols stand for and returns true; returns false (and
// leaves `out` unchanged) when a character of `token` is no byte symbol, e.g. an added token such
// as "<|im_start|>"'s neighbours written in plain Unicode. HF then uses the token's own bytes.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace turnrl::detail
