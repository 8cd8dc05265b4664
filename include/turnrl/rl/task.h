#pragma once
// Task sets: what an episode is about. A task names what the evaluator checks (its id, the
// backend) and what the prompt shows (description, reference source, the expected answer form).
// Sources: JSON Lines files, or the evaluators' built-in suites (builtin_tasks.h).
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace turnrl {

struct Task {
  std::string id;            // what EvalRequest.task names; unique in a set
  std::string backend = "cpu";  // cpu | cuda | python
  int level = 1;             // 1 elementwise/fused, 2 reductions/softmax, 3 matmul + epilogue
  std::string description;   // what to compute, with shapes
  std::string reference;     // reference implementation shown in the prompt
  std::string language = "cpp";  // the fenced-block tag answers must use: cpp | cuda | python
  std::map<std::string, std::string> metadata;
};

struct TaskSet {
  std::vector<Task> tasks;

  size_t size() const { return tasks.size(); }
  const Task& find(const std::string& id) const;  // throws naming the known ids

  // Deterministic split by a hash of (seed, id): the same task always lands on the same side,
  // whatever the order or the other tasks. validation_fraction in [0, 1].
  std::pair<TaskSet, TaskSet> split(double validation_fraction, uint64_t seed) const;
};

// Loads JSON Lines: one object a line with keys id (required), backend, level, description,
// reference, language, metadata (object of strings). Blank lines and lines starting with '#' are
// skipped. Errors name the file, the line and the key.
TaskSet load_tasks_jsonl(const std::string& path);

}  // namespace turnrl
