// One description per options struct: the reader and the writer walk the same describe(), so the
// printed YAML reads back to the same values, with the reader's strictness.
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"

namespace turnrl {

// A struct of every kind of field the visitors know.
struct DemoOptions {
  int64_t count = 3;
  double rate = 0.5;
  std::optional<double> stop_at;     // 0 = off
  std::optional<double> penalty;     // absent = unset
  bool on = false;
  std::string name = "a \"quoted\"\nname";
  std::string mode = "fast";
  std::vector<std::string> tags = {"x", "y"};
  std::vector<int64_t> ids = {1, 2};
  double beta1 = 0.9, beta2 = 0.99;
  int64_t nested_depth = 2;
};

template <typename V>
static void describe(V& v, DemoOptions& o) {
  v.integer("count", o.count, 0, 10, "how many");
  v.number("rate", o.rate, 0.0, 1.0, "a rate");
  v.number_or_off("stop_at", o.stop_at, 0.0, 100.0, "0 = off");
  v.section("extra", "optional keys", [&](auto& e) { e.optional_number("penalty", o.penalty, -1.0, 1.0, "unset = none"); });
  v.flag("on", o.on, "a switch");
  v.text("name", o.name, "any text");
  v.choice("mode", o.mode, {"fast", "slow"}, "fast | slow");
  v.texts("tags", o.tags, "words");
  v.integers("ids", o.ids, 0, 9, "small integers");
  v.unit_pair("betas", o.beta1, o.beta2, "two in [0, 1)");
  v.section("inner", "a nested section", [&](auto& i) { i.integer("depth", o.nested_depth, 1, 5, "levels"); });
}

}  // namespace turnrl

using namespace turnrl;

namespace {

// Written and read as the section `demo` of a config, as the real sections are.
std::string written(const DemoOptions& o, bool annotate = false) {
  ConfigWriter w(annotate);
  w.open("demo", "a demo section");
  write_described(w, o);
  w.close();
  return w.str();
}

DemoOptions read_back(const std::string& yaml) {
  ConfigReader root(parse_yaml(yaml, "t"), "");
  ConfigReader r = root.section("demo");
  DemoOptions o;
  read_described(r, o);
  r.finish();
  root.finish();
  return o;
}

std::string demo(const std::string& keys) {
  std::string out = "demo:\n";
  size_t start = 0;
  while (start < keys.size()) {
    const size_t end = keys.find('\n', start);
    out += "  " + keys.substr(start, end - start + 1);
    start = end + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("the defaults are written as YAML and read back unchanged", "[config]") {
  const std::string text = written(DemoOptions{});
  CHECK(text == demo("count: 3\nrate: 0.5\nstop_at: 0\nextra: {}\non: false\nname: \"a \\\"quoted\\\"\\nname\"\n"
                      "mode: fast\ntags: [\"x\", \"y\"]\nids: [1, 2]\nbetas: [0.9, 0.99]\ninner:\n  depth: 2\n"));
  const DemoOptions back = read_back(text);
  CHECK(back.name == DemoOptions{}.name);
  CHECK(!back.stop_at);
  CHECK(!back.penalty);
  CHECK(written(back) == text);
}

TEST_CASE("set optional keys are written and read back, and annotations carry the help", "[config]") {
  DemoOptions o;
  o.stop_at = 2.5;
  o.penalty = -0.5;
  o.mode = "slow";
  const DemoOptions back = read_back(written(o));
  REQUIRE(back.stop_at);
  CHECK(*back.stop_at == 2.5);
  REQUIRE(back.penalty);
  CHECK(*back.penalty == -0.5);
  CHECK(back.mode == "slow");
  const std::string annotated = written(o, true);
  CHECK(annotated.find("# 0 = off") != std::string::npos);
  CHECK(annotated.find("extra:  # optional keys\n") != std::string::npos);
  CHECK(read_back(annotated).count == 3);  // comments are YAML comments
}

TEST_CASE("the reader stays strict: ranges, words, pairs and nested keys name their path", "[config][edge]") {
  REQUIRE_THROWS_WITH(read_back(demo("count: 11\n")), Catch::Contains("demo.count"));
  REQUIRE_THROWS_WITH(read_back(demo("mode: medium\n")), Catch::Contains("allowed: fast, slow"));
  REQUIRE_THROWS_WITH(read_back(demo("betas: [0.9]\n")), Catch::Contains("demo.betas: expected two numbers in [0, 1)"));
  REQUIRE_THROWS_WITH(read_back(demo("inner:\n  depth: 9\n")), Catch::Contains("demo.inner.depth"));
  REQUIRE_THROWS_WITH(read_back(demo("extra:\n  penalty: 3\n")), Catch::Contains("demo.extra.penalty"));
  REQUIRE_THROWS_WITH(read_back(demo("inner:\n  deep: 1\n")), Catch::Contains("demo.inner.deep"));
}
