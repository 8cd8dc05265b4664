#pragma once
// Strict reading of a YAML map into an options struct: every key is looked up by name, type
// errors and out-of-range values name the key's full path, and finish() rejects keys nobody asked
// for (typos are errors, never silent defaults). Absent keys keep the struct's default.
//
//   ConfigReader r(node, "reward");
//   r.number("correct_weight", o.correct_weight, 0, 10).flag("enabled", o.enabled)
//    .choice("coverage_key", o.key, {"time_coverage", "number_coverage"});
//   r.finish();
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "turnrl/core/error.h"

namespace turnrl {

class ConfigReader {
 public:
  // node must be a map or null/undefined (an absent section: every key keeps its default).
  ConfigReader(YAML::Node node, std::string path);

  // Reads a real number in [lo, hi] (inclusive).
  ConfigReader& number(const std::string& key, double& value, double lo, double hi);
  // Reads an integer in [lo, hi] (inclusive).
  ConfigReader& integer(const std::string& key, int64_t& value, int64_t lo, int64_t hi);
  ConfigReader& integer(const std::string& key, int& value, int lo, int hi);
  ConfigReader& flag(const std::string& key, bool& value);
  ConfigReader& text(const std::string& key, std::string& value);
  // Reads a string that must be one of `allowed`.
  ConfigReader& choice(const std::string& key, std::string& value, const std::vector<std::string>& allowed);
  // Reads a list of numbers / strings.
  ConfigReader& numbers(const std::string& key, std::vector<double>& value);
  ConfigReader& texts(const std::string& key, std::vector<std::string>& value);
  // Reads a list of integers, each in [lo, hi].
  ConfigReader& integers(const std::string& key, std::vector<int64_t>& value, int64_t lo, int64_t hi);

  // A nested section (empty reader when absent); the caller finishes it.
  ConfigReader section(const std::string& key);
  // Reads the nested section `key` with read(ConfigReader&), then rejects its unknown keys.
  template <typename Fn>
  void section(const std::string& key, Fn&& read) {
    ConfigReader nested = section(key);
    read(nested);
    nested.finish();
  }
  // True when the key is present (and marks it known).
  bool has(const std::string& key);
  // Marks a key as known without reading it (handled elsewhere).
  void accept(const std::string& key);

  // Throws turnrl::Error for the first key that no read asked about, listing the known keys.
  void finish() const;

  const std::string& path() const { return path_; }
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  YAML::Node child(const std::string& key);

  YAML::Node node_;
  std::string path_;
  std::set<std::string> known_;
};

// Parses YAML text (a config file's contents); syntax errors become turnrl::Error with the line.
// A key repeated in one map (a duplicated section included) and a second document ('---') are
// errors too, naming the key's path and both lines: yaml-cpp alone would keep the first silently.
YAML::Node parse_yaml(const std::string& text, const std::string& what);
// Loads a YAML file with the same checks; a missing file or a syntax error names the file.
YAML::Node load_yaml_file(const std::string& file);

// Applies one "key.path=value" override to a YAML tree (value parsed as YAML, so 1e-3, true and
// [1, 2] keep their types); creates missing maps. Throws on a malformed override.
void apply_override(YAML::Node& root, const std::string& assignment);

// Loads `file` (empty: no keys), applies `overrides` in order and returns parse(root). An error
// about a key an override set is reported as that --set's, any other as the file's.
YAML::Node load_yaml_with_overrides(const std::string& file, const std::vector<std::string>& overrides);
[[noreturn]] void rethrow_naming_source(const std::string& what, const std::string& file,
                                        const std::vector<std::string>& overrides);
template <typename Parse>
auto load_config_file(const std::string& file, const std::vector<std::string>& overrides, Parse&& parse) {
  YAML::Node root = load_yaml_with_overrides(file, overrides);
  try {
    return parse(root);
  } catch (const Error& e) {
    rethrow_naming_source(e.what(), file, overrides);
  }
}

}  // namespace turnrl
