#pragma once
// JSON Lines files read with nlohmann_json (internal: the task loaders of rl/ and kernels/, which
// link nlohmann privately). Messages name "path:line".
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace turnrl::detail {

// Calls read(object, where) for each line of the file at `path` in order, where = "path:line";
// blank lines and lines whose first non-blank character is '#' are skipped. A file that cannot be
// opened ("cannot open {what}"), a line that is not valid JSON, or one that is not a JSON object is
// a turnrl::Error naming it.
void for_each_json_line(const std::string& path, const char* what,
                        const std::function<void(const nlohmann::json& object, const std::string& where)>& read);

// What a message says was found: "an array", "a number", "a string", "null", ...
std::string json_kind(const nlohmann::json& value);

}  // namespace turnrl::detail
