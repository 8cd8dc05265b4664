#include "utf8.h"

namespace turnrl::detail {

namespace {

// What a lead byte allows: the sequence length (0 for a byte that cannot start one) and the range
// of the second byte, which excludes overlong forms, surrogates and code points above U+10FFFF.
struct Lead {
  size_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;
};

Lead lead_of(unsigned char b) {
  Lead l;
  if (b < 0x80) l.length = 1;
  else if (b >= 0xC2 && b <= 0xDF) l.length = 2;
  else if (b >= 0xE0 && b <= 0xEF) l.length = 3, l.lo = b == 0xE0 ? 0xA0 : 0x80, l.hi = b == 0xED ? 0x9F : 0xBF;
  else if (b >= 0xF0 && b <= 0xF4) l.length = 4, l.lo = b == 0xF0 ? 0x90 : 0x80, l.hi = b == 0xF4 ? 0x8F : 0xBF;
  return l;
}

// How many bytes from `pos` belong to the sequence its lead byte starts: the whole sequence when
// it is well-formed, else the longest prefix that could still begin one (at least 1; one U+FFFD
// replaces exactly this "maximal subpart").
size_t valid_prefix(std::string_view text, size_t pos, const Lead& lead) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  if (lead.length <= 1) return 1;
  if (pos + 1 >= text.size() || byte(pos + 1) < lead.lo || byte(pos + 1) > lead.hi) return 1;
  size_t taken = 2;
  while (taken < lead.length && pos + taken < text.size() && (byte(pos + taken) & 0xC0) == 0x80) ++taken;
  return taken;
}

}  // namespace

size_t utf8_sequence_length(std::string_view text, size_t pos) {
  const Lead lead = lead_of(static_cast<unsigned char>(text[pos]));
  if (lead.length == 0) return 0;
  return valid_prefix(text, pos, lead) == lead.length ? lead.length : 0;
}

char32_t utf8_decode_at(std::string_view text, size_t pos, size_t length) {
  static constexpr unsigned char kLeadMask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  char32_t c = static_cast<unsigned char>(text[pos]) & kLeadMask[length];
  for (size_t i = 1; i < length; ++i) c = (c << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  return c;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

size_t utf8_first_invalid(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length == 0) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const size_t length = utf8_sequence_length(bytes, pos);
    if (length) {
      out.append(bytes.substr(pos, length));
      pos += length;
    } else {
      out += "\xEF\xBF\xBD";
      pos += valid_prefix(bytes, pos, lead_of(static_cast<unsigned char>(bytes[pos])));
    }
  }
  return out;
}

bool is_unicode_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_python_space(char32_t c) { return is_unicode_white_space(c) || (c >= 0x1C && c <= 0x1F); }

}  // namespace turnrl::detail
