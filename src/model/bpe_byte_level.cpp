#include "bpe_byte_level.h"

#include "../core/utf8.h"

namespace turnrl::detail {

namespace {

struct ByteLevelTables {
  std::array<std::string, 256> symbols;
  std::array<int, 0x144> byte_of{};  // code point -> byte, -1 when no byte maps there

  ByteLevelTables() {
    byte_of.fill(-1);
    const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t c = printable(b) ? char32_t(b) : char32_t(next++);
      utf8_append(symbols[b], c);
      byte_of[c] = b;
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_level_symbols() { return tables().symbols; }

void byte_level_encode(std::string_view bytes, std::string& out) {
  const auto& symbols = tables().symbols;
  for (const char b : bytes) out += symbols[static_cast<unsigned char>(b)];
}

bool byte_level_decode(std::string_view token, std::string& out) {
  const auto& byte_of = tables().byte_of;
  const size_t start = out.size();
  for (size_t pos = 0; pos < token.size();) {
    const size_t length = utf8_sequence_length(token, pos);
    const char32_t c = length ? utf8_decode_at(token, pos, length) : 0x144;
    if (c >= byte_of.size() || byte_of[c] < 0) {
      out.resize(start);
      return false;
    }
    out += char(byte_of[c]);
    pos += length;
  }
  return true;
}

}  // namespace turnrl::detail
