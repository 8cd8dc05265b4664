// Task sets: JSON Lines loading with validation, the built-in CPU suite, deterministic splits.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include "turnrl/core/error.h"
#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/rl/task.h"

using namespace turnrl;

namespace {
std::string write_temp(const std::string& text) {
  char name[] = "/tmp/turnrl_tasks_XXXXXX";
  const int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  std::ofstream(name) << text;
  return name;
}
}  // namespace

TEST_CASE("JSON Lines tasks load with every field, errors name file, line and key", "[env][task]") {
  const std::string path = write_temp(
      "# a comment\n"
      "{\"id\": \"add\", \"backend\": \"python\", \"level\": 2, \"description\": \"a + b\", \"reference\": \"class "
      "Model:\\n  pass\", \"language\": \"python\", \"metadata\": {\"source\": \"kernelbench\"}}\n"
      "\n"
      "{\"id\": \"relu\"}\n");
  const TaskSet set = load_tasks_jsonl(path);
  REQUIRE(set.size() == 2);
  REQUIRE(set.tasks[0].backend == "python");
  REQUIRE(set.tasks[0].level == 2);
  REQUIRE(set.tasks[0].reference == "class Model:\n  pass");
  REQUIRE(set.tasks[0].metadata.at("source") == "kernelbench");
  REQUIRE(set.find("relu").backend == "cpu");
  REQUIRE_THROWS_WITH(set.find("nope"), Catch::Contains("known: add, relu"));
  std::remove(path.c_str());

  const auto bad = [](const std::string& line) { return write_temp(line + "\n"); };
  REQUIRE_THROWS_WITH(load_tasks_jsonl(bad("{\"backend\": \"cpu\"}")), Catch::Contains(":1: missing required key 'id'"));
  REQUIRE_THROWS_WITH(load_tasks_jsonl(bad("{\"id\": \"a\", \"levle\": 1}")), Catch::Contains("unknown key 'levle'"));
  REQUIRE_THROWS_WITH(load_tasks_jsonl(bad("{\"id\": \"a\", \"backend\": \"tpu\"}")), Catch::Contains("allowed: cpu, cuda, python"));
  REQUIRE_THROWS_WITH(load_tasks_jsonl(bad("{\"id\": \"a\", \"level\": 7}")), Catch::Contains("level 7 is out of range"));
  REQUIRE_THROWS_WITH(load_tasks_jsonl(bad("[1, 2]")), Catch::Contains("expected a JSON object"));
  REQUIRE_THROWS_WITH(load_tasks_jsonl(bad("{\"id\": \"a\", \"level\": \"two\"}")),
                      Catch::Contains("'level' must be an integer 1..3, got \"two\""));
  REQUIRE_THROWS_WITH(load_tasks_jsonl(bad("{\"id\": 5}")), Catch::Contains("key 'id' must be a string, got a number"));
  REQUIRE_THROWS_WITH(load_tasks_jsonl(bad("{\"id\": \"a\", \"metadata\": {\"n\": 1}}")),
                      Catch::Contains("metadata.n must be a string, got a number"));
  REQUIRE_THROWS_WITH(load_tasks_jsonl(bad("{\"id\": \"a\"")), Catch::Contains(":1: not a JSON object"));
  REQUIRE_THROWS_WITH(load_tasks_jsonl("/nonexistent.jsonl"), Catch::Contains("cannot open"));
  // JSON escapes: \/ and a \u surrogate pair decode to their UTF-8 characters.
  const TaskSet escaped = load_tasks_jsonl(bad(R"({"id": "a\/b", "description": "caf\u00e9 \ud83d\ude00"})"));
  CHECK(escaped.tasks.at(0).id == "a/b");
  CHECK(escaped.tasks.at(0).description == "caf\xc3\xa9 \xf0\x9f\x98\x80");
}

TEST_CASE("built-in CPU suite and deterministic splits", "[env][task]") {
  const TaskSet all = builtin_cpu_tasks();
  REQUIRE(all.size() >= 8);
  int levels[4] = {0, 0, 0, 0};
  for (const Task& t : all.tasks) levels[t.level]++;
  REQUIRE((levels[1] > 0 && levels[2] > 0 && levels[3] > 0));
  const auto [train, val] = all.split(0.25, 7);
  REQUIRE(train.size() + val.size() == all.size());
  // Same split whatever the order of the set.
  TaskSet reversed;
  reversed.tasks.assign(all.tasks.rbegin(), all.tasks.rend());
  const auto [train2, val2] = reversed.split(0.25, 7);
  REQUIRE(val2.size() == val.size());
  for (const Task& t : val.tasks) REQUIRE_NOTHROW(val2.find(t.id));
  REQUIRE(all.split(0.0, 1).second.size() == 0);
  REQUIRE(all.split(1.0, 1).first.size() == 0);
  REQUIRE_THROWS_WITH(all.split(1.5, 1), Catch::Contains("validation_fraction"));
}
