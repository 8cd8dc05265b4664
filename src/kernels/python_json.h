#pragma once
// A small strict JSON reader and string quoting, for the Python backend's task files and its
// worker protocol (internal to src/kernels/python_*.cpp). Numbers are doubles; objects keep their
// members in file order; errors throw turnrl::Error with the byte offset.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace turnrl::python_detail {

struct Json {
  enum class Type { null, boolean, number, string, array, object };
  Type type = Type::null;
  bool boolean = false;
  double number = 0;
  std::string text;                                    // string value
  std::vector<Json> items;                             // array
  std::vector<std::pair<std::string, Json>> members;   // object

  bool is(Type t) const { return type == t; }
  // The member named key, or nullptr (also when this is not an object).
  const Json* find(const std::string& key) const;
  // The member named key, or a null value.
  const Json& operator[](const std::string& key) const;
  double num(double fallback = 0) const { return type == Type::number ? number : fallback; }
  int64_t integer(int64_t fallback = 0) const { return type == Type::number ? int64_t(number) : fallback; }
  const std::string& str() const { return text; }
  bool truthy() const { return type == Type::boolean ? boolean : type != Type::null; }
  std::vector<double> numbers() const;  // an array of numbers (nulls become 0)
};

// Parses exactly one JSON value (surrounding whitespace allowed).
Json parse_json(const std::string& text);
// "s" with JSON escapes (control characters, quote, backslash); UTF-8 passes through.
std::string json_quote(const std::string& s);
const char* json_type_name(Json::Type t);

}  // namespace turnrl::python_detail
