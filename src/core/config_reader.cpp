#include "turnrl/core/config_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/ranges.h>

#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"

namespace turnrl {
namespace {

std::string describe(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  return "null";
}

template <typename T>
T convert(const YAML::Node& n, const std::string& path, const char* type) {
  if (!n.IsScalar()) fail("{}: expected {}, got {}", path, type, describe(n));
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail("{}: expected {}, got {}", path, type, describe(n));
  }
}

}  // namespace

ConfigReader::ConfigReader(YAML::Node node, std::string path) : node_(std::move(node)), path_(std::move(path)) {
  if (node_ && !node_.IsNull() && !node_.IsMap())
    fail("{}: expected a map of keys, got {}", path_.empty() ? "config" : path_, describe(node_));
}

YAML::Node ConfigReader::child(const std::string& key) {
  known_.insert(key);
  if (!node_ || !node_.IsMap()) return YAML::Node();
  return node_[key];
}

bool ConfigReader::has(const std::string& key) {
  const YAML::Node n = child(key);
  return n && !n.IsNull();
}

void ConfigReader::accept(const std::string& key) { known_.insert(key); }

ConfigReader& ConfigReader::number(const std::string& key, double& value, double lo, double hi) {
  const YAML::Node n = child(key);
  if (!n || n.IsNull()) return *this;
  const double v = convert<double>(n, key_path(key), "a number");
  if (!(v >= lo && v <= hi)) fail("{}: {} is out of range; allowed: [{}, {}]", key_path(key), v, lo, hi);
  value = v;
  return *this;
}

ConfigReader& ConfigReader::integer(const std::string& key, int64_t& value, int64_t lo, int64_t hi) {
  const YAML::Node n = child(key);
  if (!n || n.IsNull()) return *this;
  const int64_t v = convert<int64_t>(n, key_path(key), "an integer");
  if (v < lo || v > hi) fail("{}: {} is out of range; allowed: [{}, {}]", key_path(key), v, lo, hi);
  value = v;
  return *this;
}

ConfigReader& ConfigReader::integer(const std::string& key, int& value, int lo, int hi) {
  int64_t v = value;
  integer(key, v, lo, hi);
  value = int(v);
  return *this;
}

ConfigReader& ConfigReader::flag(const std::string& key, bool& value) {
  const YAML::Node n = child(key);
  if (n && !n.IsNull()) value = convert<bool>(n, key_path(key), "true or false");
  return *this;
}

ConfigReader& ConfigReader::text(const std::string& key, std::string& value) {
  const YAML::Node n = child(key);
  if (n && !n.IsNull()) value = convert<std::string>(n, key_path(key), "a string");
  return *this;
}

ConfigReader& ConfigReader::choice(const std::string& key, std::string& value, const std::vector<std::string>& allowed) {
  std::string v = value;
  text(key, v);
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    fail("{}: '{}' is not allowed; allowed: {}", key_path(key), v, fmt::join(allowed, ", "));
  value = v;
  return *this;
}

ConfigReader& ConfigReader::numbers(const std::string& key, std::vector<double>& value) {
  const YAML::Node n = child(key);
  if (!n || n.IsNull()) return *this;
  if (!n.IsSequence()) fail("{}: expected a list of numbers, got {}", key_path(key), describe(n));
  std::vector<double> out;
  for (size_t i = 0; i < n.size(); ++i) out.push_back(convert<double>(n[i], fmt::format("{}[{}]", key_path(key), i), "a number"));
  value = std::move(out);
  return *this;
}

ConfigReader& ConfigReader::integers(const std::string& key, std::vector<int64_t>& value, int64_t lo, int64_t hi) {
  const YAML::Node n = child(key);
  if (!n || n.IsNull()) return *this;
  if (!n.IsSequence()) fail("{}: expected a list of integers, got {}", key_path(key), describe(n));
  std::vector<int64_t> out;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string path = fmt::format("{}[{}]", key_path(key), i);
    const int64_t v = convert<int64_t>(n[i], path, "an integer");
    if (v < lo || v > hi) fail("{}: {} is out of range; allowed: [{}, {}]", path, v, lo, hi);
    out.push_back(v);
  }
  value = std::move(out);
  return *this;
}

ConfigReader& ConfigReader::texts(const std::string& key, std::vector<std::string>& value) {
  const YAML::Node n = child(key);
  if (!n || n.IsNull()) return *this;
  if (!n.IsSequence()) fail("{}: expected a list of strings, got {}", key_path(key), describe(n));
  std::vector<std::string> out;
  for (size_t i = 0; i < n.size(); ++i)
    out.push_back(convert<std::string>(n[i], fmt::format("{}[{}]", key_path(key), i), "a string"));
  value = std::move(out);
  return *this;
}

ConfigReader ConfigReader::section(const std::string& key) { return ConfigReader(child(key), key_path(key)); }

void ConfigReader::finish() const {
  if (!node_ || !node_.IsMap()) return;
  for (const auto& kv : node_) {
    const std::string key = kv.first.as<std::string>();
    if (!known_.count(key))
      fail("{}: unknown key; allowed keys here: {}", key_path(key), fmt::join(known_, ", "));
  }
}

namespace {

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// yaml-cpp 0.7 keeps every pair of a map with a repeated key and looks up the first, so a
// duplicate would silently lose to its earlier twin: walk the tree and refuse it, naming both lines.
void reject_duplicate_keys(const YAML::Node& node, const std::string& path, const std::string& what) {
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) reject_duplicate_keys(node[i], fmt::format("{}[{}]", path, i), what);
    return;
  }
  if (!node.IsMap()) return;
  std::vector<std::pair<std::string, int>> seen;  // key, 1-based line
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "<complex key>";
    const int line = kv.first.Mark().line + 1;
    for (const auto& [earlier, earlier_line] : seen)
      if (earlier == key)
        fail("{}: duplicate key '{}' at lines {} and {}; each key may appear once in a map", what,
             child_path(path, key), earlier_line, line);
    seen.emplace_back(key, line);
    reject_duplicate_keys(kv.second, child_path(path, key), what);
  }
}

}  // namespace

YAML::Node parse_yaml(const std::string& text, const std::string& what) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    fail("{}: YAML syntax error at line {}, column {}: {}", what, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (documents.size() > 1)
    fail("{}: a second YAML document starts at line {} ('---'); a config holds exactly one document", what,
         documents[1].Mark().line + 1);
  if (documents.empty()) return YAML::Node();
  reject_duplicate_keys(documents[0], "", what);
  return documents[0];
}

YAML::Node load_yaml_file(const std::string& file) {
  return parse_yaml(read_file(file, "the config file"), file);
}

void apply_override(YAML::Node& root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--set '{}': expected key.path=value (e.g. --set trainer.steps=10)", assignment);
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts)
    if (p.empty()) fail("--set '{}': empty component in the key path '{}'", assignment, path);
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  YAML::Node node;
  node.reset(root);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = node[parts[i]];
    if (!next || next.IsNull()) next = YAML::Node(YAML::NodeType::Map);
    if (!next.IsMap())
      fail("--set '{}': '{}' is not a section", assignment, fmt::join(parts.begin(), parts.begin() + i + 1, "."));
    node[parts[i]] = next;
    node.reset(next);
  }
  node[parts.back()] = parse_yaml(text.empty() ? "\"\"" : text, "--set " + path);
}

YAML::Node load_yaml_with_overrides(const std::string& file, const std::vector<std::string>& overrides) {
  YAML::Node root = file.empty() ? YAML::Node(YAML::NodeType::Map) : load_yaml_file(file);
  for (const auto& o : overrides) apply_override(root, o);
  return root;
}

void rethrow_naming_source(const std::string& what, const std::string& file, const std::vector<std::string>& overrides) {
  // Errors start with the key path they are about: one an override set is that --set's error.
  for (const auto& o : overrides) {
    const std::string path = o.substr(0, o.find('='));
    if (what.compare(0, path.size() + 1, path + ":") == 0 || what.compare(0, path.size() + 1, path + ".") == 0)
      throw Error(fmt::format("--set '{}': {}", o, what));
  }
  if (file.empty()) throw Error(what);
  throw Error(fmt::format("{}: {}", file, what));
}

}  // namespace turnrl
