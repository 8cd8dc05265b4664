#include "turnrl/rl/task.h"

#include <algorithm>

#include "../core/json_lines.h"

#include "turnrl/core/hash.h"
#include "turnrl/core/error.h"
#include "turnrl/core/random.h"

namespace turnrl {

const Task& TaskSet::find(const std::string& id) const {
  for (const Task& t : tasks)
    if (t.id == id) return t;
  std::vector<std::string> ids;
  for (const Task& t : tasks) ids.push_back(t.id);
  fail("task '{}' is not in this task set; known: {}", id, fmt::join(ids, ", "));
}

std::pair<TaskSet, TaskSet> TaskSet::split(double validation_fraction, uint64_t seed) const {
  if (!(validation_fraction >= 0 && validation_fraction <= 1))
    fail("tasks.validation_fraction: {} is out of range; allowed: [0, 1]", validation_fraction);
  std::pair<TaskSet, TaskSet> out;
  for (const Task& t : tasks) {
    // FNV-1a of the id, mixed with the seed: stable across runs, machines and set orderings.
    uint64_t state = fnv1a64(t.id, kFnv1aOffset ^ seed);
    const double u = double(splitmix64(state) >> 11) * 0x1.0p-53;
    (u < validation_fraction ? out.second : out.first).tasks.push_back(t);
  }
  return out;
}

namespace {

using nlohmann::json;

// The string member `key` of a task line; "" when absent or null.
std::string string_field(const json& n, const char* key, const std::string& where, bool required) {
  const auto v = n.find(key);
  if (v == n.end() || v->is_null()) {
    if (required) fail("{}: missing required key '{}'", where, key);
    return {};
  }
  if (!v->is_string()) fail("{}: key '{}' must be a string, got {}", where, key, detail::json_kind(*v));
  return v->get<std::string>();
}

}  // namespace

TaskSet load_tasks_jsonl(const std::string& path) {
  TaskSet set;
  detail::for_each_json_line(path, "the task file", [&](const json& n, const std::string& where) {
    static const std::vector<std::string> known = {"id", "backend", "level", "description", "reference", "language", "metadata"};
    for (const auto& member : n.items())
      if (std::find(known.begin(), known.end(), member.key()) == known.end())
        fail("{}: unknown key '{}'; allowed: {}", where, member.key(), fmt::join(known, ", "));
    Task t;
    t.id = string_field(n, "id", where, true);
    if (t.id.empty()) fail("{}: 'id' must not be empty", where);
    if (auto b = string_field(n, "backend", where, false); !b.empty()) t.backend = b;
    if (t.backend != "cpu" && t.backend != "cuda" && t.backend != "python")
      fail("{}: backend '{}' is not allowed; allowed: cpu, cuda, python", where, t.backend);
    if (const auto level = n.find("level"); level != n.end()) {
      if (!level->is_number_integer()) fail("{}: 'level' must be an integer 1..3, got {}", where, level->dump());
      const int64_t value = level->get<int64_t>();
      if (value < 1 || value > 3) fail("{}: level {} is out of range; allowed: 1..3", where, value);
      t.level = int(value);
    }
    t.description = string_field(n, "description", where, false);
    t.reference = string_field(n, "reference", where, false);
    if (auto l = string_field(n, "language", where, false); !l.empty()) t.language = l;
    if (const auto meta = n.find("metadata"); meta != n.end() && !meta->is_null()) {
      if (!meta->is_object()) fail("{}: 'metadata' must be an object of strings", where);
      for (const auto& [key, value] : meta->items()) {
        if (!value.is_string()) fail("{}: metadata.{} must be a string, got {}", where, key, detail::json_kind(value));
        t.metadata[key] = value.get<std::string>();
      }
    }
    for (const Task& other : set.tasks)
      if (other.id == t.id) fail("{}: duplicate task id '{}'", where, t.id);
    set.tasks.push_back(std::move(t));
  });
  return set;
}

}  // namespace turnrl
