#include "python_json.h"

#include <cstdlib>

#include "turnrl/core/error.h"

namespace turnrl::python_detail {
namespace {

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  Json document() {
    Json v = value(0);
    skip_space();
    if (p_ != s_.size()) error("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { fail("json: {} at byte {}", what, p_); }

  void skip_space() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) ++p_;
  }

  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(p_, w.size(), w) != 0) return false;
    p_ += w.size();
    return true;
  }

  Json value(int depth) {
    if (depth > 64) error("nesting deeper than 64");
    skip_space();
    if (p_ >= s_.size()) error("unexpected end of input");
    Json v;
    const char c = s_[p_];
    if (c == '{') {
      v.type = Json::Type::object;
      ++p_;
      skip_space();
      if (p_ < s_.size() && s_[p_] == '}') return ++p_, v;
      for (;;) {
        skip_space();
        if (p_ >= s_.size() || s_[p_] != '"') error("expected a member name");
        std::string key = string();
        skip_space();
        if (p_ >= s_.size() || s_[p_] != ':') error("expected ':'");
        ++p_;
        v.members.emplace_back(std::move(key), value(depth + 1));
        skip_space();
        if (p_ < s_.size() && s_[p_] == ',') { ++p_; continue; }
        if (p_ < s_.size() && s_[p_] == '}') return ++p_, v;
        error("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.type = Json::Type::array;
      ++p_;
      skip_space();
      if (p_ < s_.size() && s_[p_] == ']') return ++p_, v;
      for (;;) {
        v.items.push_back(value(depth + 1));
        skip_space();
        if (p_ < s_.size() && s_[p_] == ',') { ++p_; continue; }
        if (p_ < s_.size() && s_[p_] == ']') return ++p_, v;
        error("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.type = Json::Type::string;
      v.text = string();
      return v;
    }
    if (literal("true")) return v.type = Json::Type::boolean, v.boolean = true, v;
    if (literal("false")) return v.type = Json::Type::boolean, v;
    if (literal("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = p_;
      if (s_[p_] == '-') ++p_;
      while (p_ < s_.size() && std::string("0123456789.eE+-").find(s_[p_]) != std::string::npos) ++p_;
      const std::string num = s_.substr(start, p_ - start);
      char* end = nullptr;
      v.number = std::strtod(num.c_str(), &end);
      if (end != num.c_str() + num.size()) p_ = start, error("malformed number '" + num + "'");
      v.type = Json::Type::number;
      return v;
    }
    error(std::string("unexpected character '") + c + "'");
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    if (p_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[p_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= uint32_t(h - '0');
      else if (h >= 'a' && h <= 'f') v |= uint32_t(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= uint32_t(h - 'A' + 10);
      else error("bad \\u escape");
    }
    return v;
  }

  std::string string() {
    ++p_;  // opening quote
    std::string out;
    for (;;) {
      if (p_ >= s_.size()) error("unterminated string");
      const char c = s_[p_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size()) error("unterminated escape");
      const char e = s_[p_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(p_, 2, "\\u") == 0) {
            p_ += 2;
            const uint32_t lo = hex4();
            cp = (lo >= 0xDC00 && lo < 0xE000) ? 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00) : 0xFFFD;
          } else if (cp >= 0xD800 && cp < 0xE000) {
            cp = 0xFFFD;
          }
          append_utf8(out, cp);
          break;
        }
        default: error(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  const std::string& s_;
  size_t p_ = 0;
};

}  // namespace

const Json* Json::find(const std::string& key) const {
  for (const auto& m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

const Json& Json::operator[](const std::string& key) const {
  static const Json null_value;
  const Json* v = find(key);
  return v ? *v : null_value;
}

std::vector<double> Json::numbers() const {
  std::vector<double> out;
  out.reserve(items.size());
  for (const auto& x : items) out.push_back(x.num(0));
  return out;
}

Json parse_json(const std::string& text) { return Parser(text).document(); }

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", int(c));
        else out += c;
    }
  }
  return out + "\"";
}

const char* json_type_name(Json::Type t) {
  switch (t) {
    case Json::Type::null: return "null";
    case Json::Type::boolean: return "a boolean";
    case Json::Type::number: return "a number";
    case Json::Type::string: return "a string";
    case Json::Type::array: return "an array";
    case Json::Type::object: return "an object";
  }
  return "?";
}

}  // namespace turnrl::python_detail
