// Metrics JSON lines, pass@k and fast@p.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include "turnrl/rl/metrics.h"
#include "kernels/trainer_test_support.h"

using namespace turnrl;

TEST_CASE("metrics JSON round-trips numbers exactly, non-finite values become null", "[trainer][metrics]") {
  const Metrics m = {{"step", 3}, {"reward/mean", 0.1 + 0.2}, {"kernel/fast@1.2", 1e-300}, {"bad", NAN}};
  const std::string line = metrics_to_json(m);
  CHECK(line.find("null") != std::string::npos);
  const Metrics back = parse_metrics_json(line);
  CHECK(back.at("step") == 3);
  CHECK(back.at("reward/mean") == 0.1 + 0.2);
  CHECK(back.at("kernel/fast@1.2") == 1e-300);
  CHECK(std::isnan(back.at("bad")));
  const Metrics nested = parse_metrics_json(R"({"step": 2, "task": "a\"b", "turns": [{"x": [1, 2]}], "ok": true})");
  CHECK(nested.size() == 2);
  CHECK(nested.at("ok") == 1);
  CHECK_THROWS(parse_metrics_json("{\"step\": }"));
  CHECK(json_string("a\"\n\x01") == "\"a\\\"\\n\\u0001\"");
  // Bytes that are not UTF-8 (a byte-level policy's response) become U+FFFD; valid UTF-8 stays.
  CHECK(json_string("a\xff" "b") == "\"a\xef\xbf\xbd" "b\"");
  CHECK(json_string("\xc3\xa9") == "\"\xc3\xa9\"");
}

TEST_CASE("a torn last line is ignored and truncation keeps steps up to a checkpoint", "[trainer][metrics]") {
  const std::string path = test::fresh_dir("metrics") + "/metrics.jsonl";
  {
    JsonlWriter w(path);
    for (int s = 1; s <= 5; ++s) w.write_line(metrics_to_json({{"step", double(s)}}));
  }
  std::ofstream(path, std::ios::app) << "{\"step\": 6, \"rew";  // killed mid-line
  CHECK(read_metrics_jsonl(path).size() == 5);
  const std::vector<DroppedLine> dropped = truncate_metrics_after(path, 3);
  const auto rows = read_metrics_jsonl(path);
  REQUIRE(rows.size() == 3);
  CHECK(rows.back().at("step") == 3);
  // The torn line is reported (it held data); lines after the step are dropped as asked, silently.
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].line == 6);
  CHECK(dropped[0].text == "{\"step\": 6, \"rew");
  CHECK_THAT(dropped[0].reason, Catch::Contains("no newline"));
}

TEST_CASE("truncation reports each garbage line with its number, reason and text", "[trainer][metrics][edge]") {
  const std::string path = test::fresh_dir("metrics-garbage") + "/metrics.jsonl";
  CHECK(truncate_metrics_after(path, 3).empty());  // no file yet: nothing to do
  std::ofstream(path) << "{\"step\": 1}\nforged line " << std::string(200, 'x') << "\n[1, 2]\n{\"step\": 2}\n";
  const std::vector<DroppedLine> dropped = truncate_metrics_after(path, 3);
  REQUIRE(dropped.size() == 2);
  CHECK(dropped[0].line == 2);
  CHECK(dropped[0].text.size() == 120);  // cut: enough to recognise it
  CHECK(dropped[0].text.rfind("forged line xxx", 0) == 0);
  CHECK_FALSE(dropped[0].reason.empty());
  CHECK(dropped[1].line == 3);
  CHECK(dropped[1].text == "[1, 2]");
  const auto rows = read_metrics_jsonl(path);
  REQUIRE(rows.size() == 2);
  CHECK(rows[1].at("step") == 2);
}

TEST_CASE("pass@k is the unbiased estimator and fast@p counts failures as speedup 0", "[trainer][metrics]") {
  CHECK(pass_at_k(4, 0, 1) == 0.0);
  CHECK(pass_at_k(4, 4, 2) == 1.0);
  CHECK(pass_at_k(4, 1, 1) == Approx(0.25));
  CHECK(pass_at_k(4, 1, 2) == Approx(0.5));        // 1 - C(3,2)/C(4,2) = 1 - 3/6
  CHECK(pass_at_k(10, 3, 5) == Approx(1 - 21.0 / 252.0));  // 1 - C(7,5)/C(10,5)
  CHECK_THROWS(pass_at_k(3, 4, 1));
  CHECK(fast_at_p({0.0, 1.0, 1.2, 2.5}, 1.2) == 0.5);  // >=, as the reference
  CHECK(fast_at_p({}, 1.0) == 0.0);
}
