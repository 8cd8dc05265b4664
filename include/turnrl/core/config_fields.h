#pragma once
// One description per options struct (as gemma.cpp's ForEach does): a struct's fields are named once,
// with their range and help text, in a `describe` template that two visitors walk:
//   FieldReader  reads them strictly from YAML through a ConfigReader (types, ranges, allowed words);
//   FieldWriter  prints them as YAML, optionally with each key's help as a comment (the resolved
//                config.yaml of a run, `turnrl config --print-defaults`, docs/configuration.md).
//
//   template <typename V>
//   void describe(V& v, ReturnOptions& o) {
//     v.choice("mode", o.mode, {"reward_to_go", "outcome", "residual"}, parse_return_mode, "reward_to_go | ...");
//     v.number("gamma", o.gamma, 0.0, 1.0, "[0, 1]");
//   }
//   void read_options(ConfigReader& r, ReturnOptions& o) { FieldReader f(r); describe(f, o); }
//   void write_options(ConfigWriter& w, const ReturnOptions& o) { FieldWriter f(w); auto c = o; describe(f, c); }
//
// Logic that only reading needs (a default derived from another key, a check across fields) goes
// after the walk, or inside `if constexpr (V::reads)`.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"

namespace turnrl {

// Writes YAML sections and keys, each key's help as a trailing comment when annotating.
class ConfigWriter {
 public:
  explicit ConfigWriter(bool annotate) : annotate_(annotate) {}
  // A section: at the top level its comment is the line above, nested it trails the name.
  void open(const std::string& name, const std::string& comment);
  void close() { --depth_; }
  // A key with its value already written as YAML.
  void key(const std::string& name, const std::string& yaml_value, const std::string& comment);
  // An empty map (a section whose keys are all unset).
  void empty(const std::string& name, const std::string& comment);
  void comment(const std::string& text);
  void raw(const std::string& line);
  const std::string& str() const { return out_; }

  // Values as YAML: texts quoted (escaped), words (choices) plain.
  static std::string quoted(const std::string& text);
  static std::string number(double v) { return fmt::format("{}", v); }

 private:
  std::string indent() const { return std::string(2 * depth_, ' '); }
  bool annotate_;
  int depth_ = 0;
  std::string out_;
};

class FieldReader {
 public:
  static constexpr bool reads = true;
  explicit FieldReader(ConfigReader& r) : r_(r) {}
  ConfigReader& reader() { return r_; }

  template <typename I>
  void integer(const char* key, I& v, int64_t lo, int64_t hi, const std::string&) {
    int64_t x = int64_t(v);
    r_.integer(key, x, lo, hi);
    v = I(x);
  }
  void number(const char* key, double& v, double lo, double hi, const std::string&) { r_.number(key, v, lo, hi); }
  // 0 (or absent) = unset.
  void number_or_off(const char* key, std::optional<double>& v, double lo, double hi, const std::string&) {
    double x = v.value_or(0.0);
    r_.number(key, x, lo, hi);
    v = x > 0 ? std::optional<double>(x) : std::nullopt;
  }
  // Set only when the key is present.
  void optional_number(const char* key, std::optional<double>& v, double lo, double hi, const std::string&) {
    if (!r_.has(key)) return;
    double x = v.value_or(0.0);
    r_.number(key, x, lo, hi);
    v = x;
  }
  void flag(const char* key, bool& v, const std::string&) { r_.flag(key, v); }
  void text(const char* key, std::string& v, const std::string&) { r_.text(key, v); }
  void choice(const char* key, std::string& v, const std::vector<std::string>& allowed, const std::string&) {
    r_.choice(key, v, allowed);
  }
  // An enumeration spelt by to_string(E) and parsed by parse(word, key path) (which may accept aliases).
  template <typename E, typename Parse>
  void choice(const char* key, E& v, const std::vector<std::string>& allowed, Parse&& parse, const std::string&) {
    std::string word = to_string(v);
    r_.choice(key, word, allowed);
    v = parse(word, r_.key_path(key));
  }
  void numbers(const char* key, std::vector<double>& v, const std::string&) { r_.numbers(key, v); }
  void texts(const char* key, std::vector<std::string>& v, const std::string&) { r_.texts(key, v); }
  void integers(const char* key, std::vector<int64_t>& v, int64_t lo, int64_t hi, const std::string&) {
    r_.integers(key, v, lo, hi);
  }
  // Two numbers in [0, 1) written as one list (Adam's betas).
  void unit_pair(const char* key, double& first, double& second, const std::string&) {
    std::vector<double> pair = {first, second};
    r_.numbers(key, pair);
    if (pair.size() != 2 || !(pair[0] >= 0 && pair[0] < 1) || !(pair[1] >= 0 && pair[1] < 1))
      fail("{}: expected two numbers in [0, 1), got [{}]", r_.key_path(key), fmt::join(pair, ", "));
    first = pair[0], second = pair[1];
  }
  // A nested section; its unknown keys are errors.
  template <typename Fn>
  void section(const char* key, const std::string&, Fn&& fn) {
    ConfigReader sub = r_.section(key);
    FieldReader fields(sub);
    fn(fields);
    sub.finish();
  }
  // A nested section that is a struct of its own, with its own describe().
  template <typename T>
  void section(const char* key, T& nested, const std::string& help) {
    section(key, help, [&](FieldReader& fields) { describe(fields, nested); });
  }

 private:
  ConfigReader& r_;
};

class FieldWriter {
 public:
  static constexpr bool reads = false;
  explicit FieldWriter(ConfigWriter& w) : w_(w) {}

  template <typename I>
  void integer(const char* key, I& v, int64_t, int64_t, const std::string& help) {
    w_.key(key, fmt::format("{}", int64_t(v)), help);
  }
  void number(const char* key, double& v, double, double, const std::string& help) {
    w_.key(key, ConfigWriter::number(v), help);
  }
  void number_or_off(const char* key, std::optional<double>& v, double, double, const std::string& help) {
    w_.key(key, ConfigWriter::number(v.value_or(0.0)), help);
  }
  void optional_number(const char* key, std::optional<double>& v, double, double, const std::string& help) {
    if (v) w_.key(key, ConfigWriter::number(*v), help);
  }
  void flag(const char* key, bool& v, const std::string& help) { w_.key(key, v ? "true" : "false", help); }
  void text(const char* key, std::string& v, const std::string& help) { w_.key(key, ConfigWriter::quoted(v), help); }
  void choice(const char* key, std::string& v, const std::vector<std::string>&, const std::string& help) {
    w_.key(key, v, help);
  }
  template <typename E, typename Parse>
  void choice(const char* key, E& v, const std::vector<std::string>&, Parse&&, const std::string& help) {
    w_.key(key, to_string(v), help);
  }
  void numbers(const char* key, std::vector<double>& v, const std::string& help) {
    w_.key(key, fmt::format("[{}]", fmt::join(v, ", ")), help);
  }
  void texts(const char* key, std::vector<std::string>& v, const std::string& help);
  void integers(const char* key, std::vector<int64_t>& v, int64_t, int64_t, const std::string& help) {
    w_.key(key, fmt::format("[{}]", fmt::join(v, ", ")), help);
  }
  void unit_pair(const char* key, double& first, double& second, const std::string& help) {
    w_.key(key, fmt::format("[{}, {}]", ConfigWriter::number(first), ConfigWriter::number(second)), help);
  }
  // A nested section; written as {} when none of its keys is set.
  template <typename Fn>
  void section(const char* key, const std::string& help, Fn&& fn) {
    ConfigWriter inner(false);
    FieldWriter probe(inner);
    fn(probe);
    if (inner.str().empty()) return w_.empty(key, help);
    w_.open(key, help);
    fn(*this);
    w_.close();
  }
  template <typename T>
  void section(const char* key, T& nested, const std::string& help) {
    section(key, help, [&](FieldWriter& fields) { describe(fields, nested); });
  }

 private:
  ConfigWriter& w_;
};

// A struct's read_options / write_options from its describe() (found by argument-dependent lookup,
// so the describe overloads live in namespace turnrl of the calling file).
template <typename T>
void read_described(ConfigReader& r, T& options) {
  FieldReader fields(r);
  describe(fields, options);
}
template <typename T>
void write_described(ConfigWriter& w, T options) {
  FieldWriter fields(w);
  describe(fields, options);
}

// A section of a config file: its comment, then what write_options(writer, options) writes.
template <typename T>
void write_options_section(ConfigWriter& w, const std::string& name, const std::string& comment, const T& options) {
  w.open(name, comment);
  write_options(w, options);
  w.close();
}

}  // namespace turnrl
