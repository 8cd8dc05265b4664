#include "json_lines.h"

#include <fstream>

#include "turnrl/core/error.h"

namespace turnrl::detail {

void for_each_json_line(const std::string& path, const char* what,
                        const std::function<void(const nlohmann::json& object, const std::string& where)>& read) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open {}", path, what);
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string where = fmt::format("{}:{}", path, lineno);
    const nlohmann::json object = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) fail("{}: not a JSON object (the line is not valid JSON)", where);
    if (!object.is_object()) fail("{}: expected a JSON object, got {}", where, json_kind(object));
    read(object, where);
  }
  if (in.bad()) fail("{}: cannot read {}", path, what);
}

std::string json_kind(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  return std::string(value.is_array() || value.is_object() ? "an " : "a ") + value.type_name();
}

}  // namespace turnrl::detail
