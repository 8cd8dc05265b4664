#pragma once
// Reading tokenizer.json / tokenizer_config.json with errors that name the file, the JSON path and
// the value found (internal to the tokenizer sources).
#include <string>

#include <nlohmann/json.hpp>

#include "turnrl/core/error.h"

namespace turnrl::detail {

// A JSON node together with where it sits: "tokenizer.json: pre_tokenizer.pretokenizers[1]".
struct JsonAt {
  const nlohmann::json& node;
  std::string source;  // file name for messages
  std::string path;    // JSON path from the root ("" at the root)

  std::string where() const { return path.empty() ? source : source + ": " + path; }
  JsonAt operator[](const char* key) const { return {node.at(key), source, child(key)}; }
  // Member `key`, or a null node with that path when it is absent.
  JsonAt optional(const char* key) const {
    static const nlohmann::json null;
    return node.is_object() && node.contains(key) ? (*this)[key] : JsonAt{null, source, child(key)};
  }
  JsonAt operator[](size_t index) const { return {node.at(index), source, path + "[" + std::to_string(index) + "]"}; }
  bool has(const char* key) const { return node.is_object() && node.contains(key) && !node.at(key).is_null(); }

  // The member `key`, which must exist (null counts as missing).
  JsonAt required(const char* key) const {
    if (!node.is_object()) fail("{}: expected a JSON object, found {}", where(), node.dump().substr(0, 80));
    if (!has(key)) fail("{}: missing '{}'", where(), key);
    return (*this)[key];
  }
  std::string string() const {
    if (!node.is_string()) fail("{}: expected a string, found {}", where(), node.dump().substr(0, 80));
    return node.get<std::string>();
  }
  bool boolean() const {
    if (!node.is_boolean()) fail("{}: expected true or false, found {}", where(), node.dump().substr(0, 80));
    return node.get<bool>();
  }
  std::string child(const char* key) const { return path.empty() ? std::string(key) : path + "." + key; }
  int64_t integer() const {
    if (!node.is_number_integer()) fail("{}: expected an integer, found {}", where(), node.dump().substr(0, 80));
    return node.get<int64_t>();
  }
  // Member `key` as a bool, `fallback` when absent or null (HF's serde defaults).
  bool flag(const char* key, bool fallback) const { return has(key) ? (*this)[key].boolean() : fallback; }
  void expect_array() const {
    if (!node.is_array()) fail("{}: expected an array, found {}", where(), node.dump().substr(0, 80));
  }
};

// Parses JSON text; a syntax error names the source and the byte offset.
inline nlohmann::json parse_json(std::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: not valid JSON (byte {}): {}", source, e.byte, e.what());
  }
}

}  // namespace turnrl::detail
