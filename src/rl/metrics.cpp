#include "turnrl/rl/metrics.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "turnrl/core/error.h"
#include "../core/utf8.h"

namespace turnrl {

std::string json_string(const std::string& text) {
  // JSON is UTF-8: bytes that are not (a byte-level policy's response can be anything) become
  // U+FFFD, as HF's decode shows them, so every line stays readable by any JSON parser.
  const std::string s = detail::utf8_first_invalid(text) == std::string::npos ? text : detail::utf8_lossy(text);
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += char(c);
    }
  }
  return out + "\"";
}

std::string metrics_to_json(const Metrics& metrics) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, v] : metrics) {
    if (!first) out += ", ";
    first = false;
    out += json_string(key) + ": " + (std::isfinite(v) ? fmt::format("{}", v) : std::string("null"));
  }
  return out + "}";
}

namespace {

// A small recursive-descent reader for the flat objects this module writes.
class JsonReader {
 public:
  explicit JsonReader(const std::string& s) : s_(s) {}

  Metrics object() {
    Metrics out;
    expect('{');
    skip_ws();
    if (peek() == '}') return ++pos_, out;
    while (true) {
      skip_ws();
      const std::string key = string();
      expect(':');
      skip_ws();
      const char c = peek();
      if (c == '"') string();
      else if (c == '{' || c == '[') skip_nested();
      else if (s_.compare(pos_, 4, "null") == 0) pos_ += 4, out[key] = std::numeric_limits<double>::quiet_NaN();
      else if (s_.compare(pos_, 4, "true") == 0) pos_ += 4, out[key] = 1;
      else if (s_.compare(pos_, 5, "false") == 0) pos_ += 5, out[key] = 0;
      else out[key] = number();
      skip_ws();
      if (peek() == ',') { ++pos_; continue; }
      expect('}');
      return out;
    }
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail("metrics JSON: expected '{}' at column {} of: {}", c, pos_ + 1, s_.substr(0, 200));
    ++pos_;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) {
        const char e = s_[++pos_];
        if (e == 'u') {
          out += '?';
          pos_ += 4;
        } else {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        }
        ++pos_;
        continue;
      }
      out += s_[pos_++];
    }
    expect('"');
    return out;
  }
  double number() {
    const char* begin = s_.c_str() + pos_;
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin) fail("metrics JSON: expected a number at column {} of: {}", pos_ + 1, s_.substr(0, 200));
    pos_ += size_t(end - begin);
    return v;
  }
  void skip_nested() {
    int depth = 0;
    bool in_string = false;
    for (; pos_ < s_.size(); ++pos_) {
      const char c = s_[pos_];
      if (in_string) {
        if (c == '\\') ++pos_;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        ++pos_;
        return;
      }
    }
    fail("metrics JSON: unterminated value in: {}", s_.substr(0, 200));
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

Metrics parse_metrics_json(const std::string& line) { return JsonReader(line).object(); }

std::vector<Metrics> read_metrics_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read metrics file '{}'", path);
  std::vector<Metrics> out;
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (in.eof()) break;  // no newline: a line torn by a killed writer
    try {
      out.push_back(parse_metrics_json(line));
    } catch (const Error& e) {
      fail("{}:{}: {}", path, number, e.what());
    }
  }
  return out;
}

JsonlWriter::JsonlWriter(const std::string& path) : out_(path, CheckedFile::Mode::append) {}

void JsonlWriter::write_line(const std::string& json) {
  out_.write(json + "\n");
  out_.sync();  // a line on disk or an error now, not at exit
}

std::vector<DroppedLine> truncate_metrics_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return {};
  std::vector<DroppedLine> dropped;
  std::string kept, line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (in.eof()) {  // no newline: torn by a killed writer
      dropped.push_back({number, line.substr(0, 120), "the last line has no newline (a write cut short)"});
      break;
    }
    Metrics m;
    try {
      m = parse_metrics_json(line);
    } catch (const Error& e) {
      dropped.push_back({number, line.substr(0, 120), e.what()});
      continue;
    }
    const auto it = m.find("step");
    if (it != m.end() && it->second <= double(step)) kept += line + "\n";
  }
  in.close();
  write_file_atomically(path, kept);
  return dropped;
}

const std::vector<std::pair<std::string, std::string>>& verl_metric_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"actor/clip_frac", "actor/pg_clipfrac"},
      {"actor/clip_frac_lower", "actor/pg_clipfrac_lower"},
      {"actor/approx_kl", "actor/ppo_kl"},
      {"optim/grad_norm", "actor/grad_norm"},
      {"optim/lr", "actor/lr"},
      {"time/generate_s", "timing_s/gen"},
      {"time/eval_s", "timing_s/reward"},
      {"time/update_s", "timing_s/update_actor"},
      {"time/step_s", "timing_s/step"},
  };
  return aliases;
}

void add_verl_metric_names(Metrics& metrics) {
  for (const auto& [ours, verl] : verl_metric_aliases()) {
    const auto it = metrics.find(ours);
    if (it != metrics.end()) metrics[verl] = it->second;
  }
}

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  require(n >= 1 && c >= 0 && c <= n && k >= 1 && k <= n,
          fmt::format("pass_at_k: need 0 <= c <= n and 1 <= k <= n; got n={} c={} k={}", n, c, k));
  if (n - c < k) return 1.0;
  double fail_all = 1.0;  // C(n-c, k) / C(n, k) as a product
  for (int64_t i = n - c + 1; i <= n; ++i) fail_all *= 1.0 - double(k) / double(i);
  return 1.0 - fail_all;
}

double fast_at_p(const std::vector<double>& best_speedups, double p) {
  if (best_speedups.empty()) return 0.0;
  int64_t hits = 0;
  for (double s : best_speedups) hits += s >= p;
  return double(hits) / double(best_speedups.size());
}

}  // namespace turnrl
