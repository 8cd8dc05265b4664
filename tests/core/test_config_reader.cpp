// ConfigReader: strict YAML reading — types, ranges, choices, unknown keys, nested sections.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <catch2/catch.hpp>

#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"

using namespace turnrl;

TEST_CASE("values are read, defaults kept, and errors name the key path", "[config]") {
  const YAML::Node root = parse_yaml("algo:\n  gamma: 0.9\n  name: trloo\n  epochs: 2\n  on: true\n  xs: [1, 2.5]\n", "test");
  ConfigReader top(root, "");
  ConfigReader r = top.section("algo");
  double gamma = 1.0, lambda = 0.95;
  int epochs = 1;
  bool on = false;
  std::string name = "grpo";
  std::vector<double> xs;
  r.number("gamma", gamma, 0, 1).number("lambda", lambda, 0, 1).integer("epochs", epochs, 1, 10).flag("on", on)
      .choice("name", name, {"trloo", "grpo"}).numbers("xs", xs);
  REQUIRE_NOTHROW(r.finish());
  REQUIRE_NOTHROW(top.finish());
  REQUIRE(gamma == 0.9);
  REQUIRE(lambda == 0.95);
  REQUIRE(epochs == 2);
  REQUIRE(on);
  REQUIRE(name == "trloo");
  REQUIRE(xs == std::vector<double>{1, 2.5});
}

TEST_CASE("bad values: type, range, choice, unknown key, syntax", "[config][edge]") {
  double x = 0;
  std::string s = "a";
  {
    ConfigReader r(parse_yaml("ppo: {clip: high}", "t")["ppo"], "ppo");
    REQUIRE_THROWS_WITH(r.number("clip", x, 0, 1), "ppo.clip: expected a number, got 'high'");
  }
  {
    ConfigReader r(parse_yaml("ppo: {clip: 1.5}", "t")["ppo"], "ppo");
    REQUIRE_THROWS_WITH(r.number("clip", x, 0, 1), "ppo.clip: 1.5 is out of range; allowed: [0, 1]");
  }
  {
    ConfigReader r(parse_yaml("adv: {name: grpoo}", "t")["adv"], "adv");
    REQUIRE_THROWS_WITH(r.choice("name", s, {"a", "trloo"}), "adv.name: 'grpoo' is not allowed; allowed: a, trloo");
  }
  {
    ConfigReader r(parse_yaml("adv: {gama: 0.9}", "t")["adv"], "adv");
    r.number("gamma", x, 0, 1);
    REQUIRE_THROWS_WITH(r.finish(), Catch::Contains("adv.gama: unknown key") && Catch::Contains("gamma"));
  }
  REQUIRE_THROWS_WITH(parse_yaml("a: [1, 2", "cfg.yaml"), Catch::Contains("cfg.yaml: YAML syntax error at line"));
  REQUIRE_THROWS_WITH(load_yaml_file("/nonexistent/x.yaml"), Catch::Contains("cannot open"));
  REQUIRE_THROWS_WITH(ConfigReader(parse_yaml("[1, 2]", "t"), "root"), Catch::Contains("expected a map"));
}

TEST_CASE("a repeated key, a repeated section and a second document are errors naming both lines", "[config][edge]") {
  REQUIRE_THROWS_WITH(parse_yaml("trainer:\n  steps: 5\n  lr: 1\n  steps: 7\n", "cfg.yaml"),
                      Catch::Contains("cfg.yaml: duplicate key 'trainer.steps' at lines 2 and 4"));
  REQUIRE_THROWS_WITH(parse_yaml("trainer:\n  steps: 5\nreward: {}\ntrainer:\n  lr: 1\n", "cfg.yaml"),
                      Catch::Contains("duplicate key 'trainer' at lines 1 and 4"));
  REQUIRE_THROWS_WITH(parse_yaml("tasks:\n  - {name: a, name: b}\n", "cfg.yaml"),
                      Catch::Contains("duplicate key 'tasks[0].name' at lines 2 and 2"));
  REQUIRE_THROWS_WITH(parse_yaml("a: 1\n---\nb: 2\n", "cfg.yaml"),
                      Catch::Contains("cfg.yaml: a second YAML document starts at line 3"));
  // Equal values under different parents, one explicit document, and an empty text are fine.
  const YAML::Node ok = parse_yaml("---\na: {x: 1}\nb: {x: 1}\n", "cfg.yaml");
  CHECK(ok["a"]["x"].as<int>() == 1);
  CHECK(ok["b"]["x"].as<int>() == 1);
  CHECK(parse_yaml("", "cfg.yaml").IsNull());
}

TEST_CASE("load_yaml_file applies the same duplicate check and names the file", "[config][edge]") {
  char dir[] = "/tmp/turnrl-config-reader-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string file = std::string(dir) + "/cfg.yaml";
  std::ofstream(file) << "evaluator:\n  backend: cpu\n  backend: cuda\n";
  REQUIRE_THROWS_WITH(load_yaml_file(file), Catch::Contains(file + ": duplicate key 'evaluator.backend' at lines 2 and 3"));
  std::remove(file.c_str());
  rmdir(dir);
}
