#include "turnrl/rl/task.h"

#include <fstream>

#include <yaml-cpp/yaml.h>

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

std::string string_field(const YAML::Node& n, const char* key, const std::string& where, bool required) {
  const YAML::Node v = n[key];
  if (!v || v.IsNull()) {
    if (required) fail("{}: missing required key '{}'", where, key);
    return {};
  }
  if (!v.IsScalar()) fail("{}: key '{}' must be a string", where, key);
  return v.as<std::string>();
}

}  // namespace

TaskSet load_tasks_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open the task file", path);
  TaskSet set;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string where = fmt::format("{}:{}", path, lineno);
    YAML::Node n;
    try {
      n = YAML::Load(line);  // JSON is valid YAML flow syntax: no extra dependency
    } catch (const YAML::Exception& e) {
      fail("{}: not a JSON object: {}", where, e.msg);
    }
    if (!n.IsMap()) fail("{}: expected a JSON object", where);
    static const std::vector<std::string> known = {"id", "backend", "level", "description", "reference", "language", "metadata"};
    for (const auto& kv : n) {
      const std::string key = kv.first.as<std::string>();
      if (std::find(known.begin(), known.end(), key) == known.end())
        fail("{}: unknown key '{}'; allowed: {}", where, key, fmt::join(known, ", "));
    }
    Task t;
    t.id = string_field(n, "id", where, true);
    if (t.id.empty()) fail("{}: 'id' must not be empty", where);
    if (auto b = string_field(n, "backend", where, false); !b.empty()) t.backend = b;
    if (t.backend != "cpu" && t.backend != "cuda" && t.backend != "python")
      fail("{}: backend '{}' is not allowed; allowed: cpu, cuda, python", where, t.backend);
    if (n["level"]) {
      try {
        t.level = n["level"].as<int>();
      } catch (const YAML::Exception&) {
        fail("{}: 'level' must be an integer 1..3", where);
      }
      if (t.level < 1 || t.level > 3) fail("{}: level {} is out of range; allowed: 1..3", where, t.level);
    }
    t.description = string_field(n, "description", where, false);
    t.reference = string_field(n, "reference", where, false);
    if (auto l = string_field(n, "language", where, false); !l.empty()) t.language = l;
    if (const YAML::Node m = n["metadata"]; m && !m.IsNull()) {
      if (!m.IsMap()) fail("{}: 'metadata' must be an object of strings", where);
      for (const auto& kv : m) t.metadata[kv.first.as<std::string>()] = kv.second.as<std::string>();
    }
    for (const Task& other : set.tasks)
      if (other.id == t.id) fail("{}: duplicate task id '{}'", where, t.id);
    set.tasks.push_back(std::move(t));
  }
  return set;
}

}  // namespace turnrl
