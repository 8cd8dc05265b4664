// TrainConfig: defaults round-trip through YAML, overrides, and strict errors naming the key.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <string>

#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/config.h"
#include "kernels/trainer_test_support.h"

using namespace turnrl;

namespace {

TrainConfig parse(const std::string& yaml) { return test::parse_config_text(yaml); }
std::string error_of(const std::string& yaml) { return test::config_error(yaml); }

}  // namespace

TEST_CASE("the printed defaults parse back to the default config", "[trainer][config]") {
  const std::string printed = default_config_yaml();
  const TrainConfig back = parse(printed);
  CHECK(config_to_yaml(back) == config_to_yaml(TrainConfig{}));
  // Annotated: every section carries a comment line.
  CHECK(printed.find("# Advantage estimator") != std::string::npos);
  CHECK(printed.find("estimator: trloo") != std::string::npos);
}

TEST_CASE("a modified config survives config_to_yaml and parse_config", "[trainer][config]") {
  TrainConfig c = parse(R"(
trainer: {steps: 7, samples_per_task: 3}
optimizer: {lr: 0.0005, betas: [0.8, 0.95], schedule: cosine, warmup_steps: 2}
advantage: {estimator: grpo, grouping: trajectory}
reward: {function: like_kernel, penalties: {compile: -0.25}}
mismatch: {rs_level: turn, rs_upper: 2.0}
tasks: {include: [relu_bias, softmax_rows]}
env: {max_turns: 4, target_speedup: 1.5}
)");
  CHECK(c.trainer.steps == 7);
  CHECK(c.optimizer.beta2 == 0.95);
  CHECK(c.estimator == "grpo");
  CHECK(c.mismatch.rs_lower == Approx(0.5));
  CHECK(c.reward.penalty(RewardOutcome::compile) == -0.25);
  CHECK(c.reward.penalty(RewardOutcome::format) == -1.0);  // like_kernel's default stays unset
  const TrainConfig back = parse(config_to_yaml(c));
  CHECK(config_to_yaml(back) == config_to_yaml(c));
  CHECK(back.env.target_speedup.value() == 1.5);
  CHECK(back.tasks.include == std::vector<std::string>{"relu_bias", "softmax_rows"});
  CHECK_FALSE(back.reward.format_penalty.has_value());
}

TEST_CASE("unknown keys, wrong types and out-of-range values name the key path", "[trainer][config]") {
  CHECK_THAT(error_of("trainer: {stepz: 3}"), Catch::Contains("trainer") && Catch::Contains("stepz"));
  CHECK_THAT(error_of("nonsense: {a: 1}"), Catch::Contains("nonsense"));
  CHECK_THAT(error_of("trainer: {steps: many}"), Catch::Contains("trainer.steps") && Catch::Contains("expected"));
  CHECK_THAT(error_of("trainer: {steps: 0}"), Catch::Contains("trainer.steps") && Catch::Contains("allowed"));
  CHECK_THAT(error_of("optimizer: {betas: [0.9]}"), Catch::Contains("optimizer.betas"));
  CHECK_THAT(error_of("optimizer: {schedule: linear}"), Catch::Contains("optimizer.schedule") && Catch::Contains("cosine"));
  CHECK_THAT(error_of("advantage: {estimator: grpoo}"), Catch::Contains("advantage.estimator") && Catch::Contains("trloo"));
  CHECK_THAT(error_of("mismatch: {rs_level: everything}"), Catch::Contains("mismatch.rs_level"));
  CHECK_THAT(error_of("reward: {coverage: {weight: -1}}"), Catch::Contains("reward.coverage.weight"));
  CHECK_THAT(error_of("rejection: {prs: {threshold: 2}}"), Catch::Contains("rejection.prs.threshold"));
  CHECK_THAT(error_of("model: {d_model: 30, heads: 4}"), Catch::Contains("model.heads"));
  CHECK_THAT(error_of("eval: {samples: 2, pass_k: [4]}"), Catch::Contains("eval.pass_k"));
  CHECK_THAT(error_of("tasks: {source: file}"), Catch::Contains("tasks.file"));
  CHECK_THAT(error_of("trainer: 3"), Catch::Contains("trainer") && Catch::Contains("map"));
}

TEST_CASE("key.path=value overrides reach nested keys, keep YAML types and are checked like the file", "[trainer][config]") {
  YAML::Node root = parse_yaml("trainer: {steps: 5}", "test");
  apply_override(root, "trainer.steps=9");
  apply_override(root, "rejection.prs.enabled=false");
  apply_override(root, "optimizer.betas=[0.5, 0.6]");
  apply_override(root, "run.dir=/tmp/x y");
  const TrainConfig c = parse_config(root);
  CHECK(c.trainer.steps == 9);
  CHECK_FALSE(c.rejection.prs.enabled);
  CHECK(c.optimizer.beta1 == 0.5);
  CHECK(c.run.dir == "/tmp/x y");

  CHECK_THROWS_WITH(apply_override(root, "no_equals_sign"), Catch::Contains("key.path=value"));
  CHECK_THROWS_WITH(apply_override(root, "trainer..steps=1"), Catch::Contains("empty component"));
  CHECK_THROWS_WITH(apply_override(root, "trainer.steps.deeper=1"), Catch::Contains("not a section"));
  YAML::Node bad = parse_yaml("{}", "test");
  apply_override(bad, "trainer.stepz=1");
  CHECK_THROWS_WITH(parse_config(bad), Catch::Contains("stepz"));
  // The python backend's problem scaling: sizes in MiB in YAML, bytes in ProblemScaling.
  const TrainConfig scaled = load_config("", {"evaluator.python.scaling.ship_mib=1.5", "evaluator.python.scaling.spot_checks=64",
                                              "evaluator.python.scaling.large_mib=512"});
  CHECK(scaled.evaluator.python.scaling.ship_bytes == 3 * (int64_t(1) << 19));
  CHECK(scaled.evaluator.python.scaling.spot_checks == 64);
  CHECK(scaled.evaluator.python.scaling.large_bytes == int64_t(512) << 20);
  CHECK(load_config("", {}).evaluator.python.scaling.ship_bytes == ProblemScaling().ship_bytes);
  CHECK_THROWS_WITH(load_config("", {"evaluator.python.scaling.hold_fraction=0"}),
                    Catch::Contains("evaluator.python.scaling.hold_fraction"));
  // Overlapping evaluation with sampling only where the evaluator measures elsewhere.
  CHECK_THROWS_WITH(load_config("", {"trainer.rollout_waves=2"}),
                    Catch::Contains("trainer.rollout_waves: 2 overlaps evaluation with sampling") &&
                        Catch::Contains("the CPU cores the policy samples on"));
  CHECK_THROWS_WITH(load_config("", {"trainer.rollout_waves=2", "model.device=cuda", "evaluator.backend=python"}),
                    Catch::Contains("evaluator.python.device 'auto'"));
  CHECK(load_config("", {"trainer.rollout_waves=2", "evaluator.backend=remote"}).trainer.rollout_waves == 2);
  CHECK(load_config("", {"trainer.rollout_waves=3", "model.device=cuda", "evaluator.backend=python",
                         "evaluator.python.device=cpu", "tasks.source=file", "tasks.file=x.jsonl"})
            .trainer.rollout_waves == 3);
  CHECK_THROWS_WITH(load_config("", {"trainer.rollout_waves=0"}), Catch::Contains("trainer.rollout_waves"));
  CHECK_THROWS_WITH(load_config("", {"trainer.steps=-3"}), Catch::Contains("trainer.steps"));
}

TEST_CASE("the shipped configs load", "[trainer][config]") {
  for (const char* name : {"cpu_default.yaml", "grpo_baseline.yaml", "drkernel_cuda.yaml", "drkernel_triton_cuda.yaml",
                           "cpu_code_actions.yaml", "cpu_qwen3_code.yaml"}) {
    INFO(name);
    const TrainConfig c = load_config(std::string(TURNRL_SOURCE_DIR) + "/configs/" + name);
    CHECK(c.trainer.steps >= 1);
  }
  const TrainConfig grpo = load_config(std::string(TURNRL_SOURCE_DIR) + "/configs/grpo_baseline.yaml");
  CHECK(grpo.estimator == "grpo");
}

TEST_CASE("docs/configuration.md shows the defaults the code prints", "[trainer][config]") {
  std::ifstream in(std::string(TURNRL_SOURCE_DIR) + "/docs/configuration.md");
  REQUIRE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t open = doc.find("```yaml\n");
  REQUIRE(open != std::string::npos);
  const size_t start = open + 8, close = doc.find("```", start);
  REQUIRE(close != std::string::npos);
  // The list of evaluator backends built into this binary differs between builds; the doc says so
  // in its place.
  const auto without_built = [](std::string text) {
    const size_t at = text.find("| remote (");
    if (at != std::string::npos) text.erase(at + 8, text.find(')', at) + 1 - (at + 8));
    return text;
  };
  INFO("regenerate the block with `turnrl config --print-defaults`");
  CHECK(without_built(doc.substr(start, close - start)) == without_built(default_config_yaml()));
}

TEST_CASE("an override's error names the --set, a file's error names the file", "[trainer][config]") {
  const std::string file = std::string(TURNRL_SOURCE_DIR) + "/configs/cpu_default.yaml";
  std::string what;
  try {
    load_config(file, {"trainer.steps=3", "trainer.stepz=3"});
  } catch (const Error& e) {
    what = e.what();
  }
  CHECK(what.rfind("--set 'trainer.stepz=3': trainer.stepz: unknown key", 0) == 0);
  CHECK(what.find("cpu_default.yaml") == std::string::npos);
  CHECK_THROWS_WITH(load_config(file, {"trainer.steps=-3"}), Catch::StartsWith("--set 'trainer.steps=-3': trainer.steps"));
  CHECK_THROWS_WITH(load_config("", {"sampling.top_p=7"}), Catch::StartsWith("--set 'sampling.top_p=7'"));
}

TEST_CASE("settings that cannot run are refused when the config is read", "[trainer][config]") {
  CHECK_THAT(error_of("advantage: {estimator: gae}"), Catch::Contains("advantage.estimator: 'gae' needs critic values") &&
                                                          Catch::Contains("trloo"));
  CHECK_THAT(error_of("evaluator: {backend: python}"),
             Catch::Contains("tasks.source: 'builtin' has no task suite for evaluator.backend 'python'"));
  CHECK_THAT(error_of("evaluator: {backend: remote, remote: {worker_backend: python}}"),
             Catch::Contains("evaluator.remote.worker_backend 'python'"));
  CHECK(error_of("evaluator: {backend: python}\ntasks: {source: file, file: t.jsonl}").empty());
  // Remote workers of a local backend with a built-in suite: the trainer sends that suite.
  const TrainConfig remote = parse("evaluator: {backend: remote, remote: {worker_backend: cuda}}");
  CHECK(builtin_task_backend(remote.evaluator) == "cuda");
  CHECK(builtin_task_backend(parse("{}").evaluator) == "cpu");
  CHECK_THAT(error_of("evaluator: {remote: {worker_backend: tpu}}"), Catch::Contains("allowed: cpu, cuda, python"));
}
