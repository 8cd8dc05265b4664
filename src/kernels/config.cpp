#include "turnrl/kernels/config.h"

#include <algorithm>

#include <fmt/format.h>

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"

namespace turnrl {

// The kernel recipe's own sections, described once (core/config_fields.h); the engine's sections and
// each stage's are described next to their options structs. Checks across fields follow in check().
template <typename V>
static void describe(V& v, TasksConfig& o) {
  v.choice("source", o.source, {"builtin", "file"}, "builtin | file");
  v.text("file", o.file, "JSON Lines task file (source: file)");
  v.texts("include", o.include, "task ids; [] = every task with a plan template");
  v.number("validation_fraction", o.validation_fraction, 0.0, 1.0, "share held out for eval; [0, 1]");
  v.integer("split_seed", o.split_seed, 0, INT64_MAX, "seed of the hash split");
}

template <typename V>
static void describe(V& v, EvalConfig& o) {
  v.integer("samples", o.samples, 1, 1 << 20, "episodes per task");
  v.number("temperature", o.temperature, 1e-3, 100.0, "> 0");
  v.number("top_p", o.top_p, 1e-6, 1.0, "(0, 1]");
  v.numbers("pass_k", o.pass_k, "pass@k for these k; integers in [1, samples]");
  v.numbers("fast_p", o.fast_p, "fast@p thresholds");
  v.choice("split", o.split, {"all", "validation", "train"}, "all | validation | train");
  v.integer("seed", o.seed, 0, INT64_MAX, "sampling seed");
}

static void write_options(ConfigWriter& w, const TasksConfig& o) { write_described(w, o); }
static void write_options(ConfigWriter& w, const EvalConfig& o) { write_described(w, o); }

namespace {

// Checks across the fields of a section, after reading (r names the keys).
template <typename T>
void check(const ConfigReader&, const T&) {}

void check(const ConfigReader& r, const TasksConfig& o) {
  if (o.source == "file" && o.file.empty())
    fail("{}: source 'file' needs a JSON Lines file; set {}", r.key_path("source"), r.key_path("file"));
}

void check(const ConfigReader& r, const EvalConfig& o) {
  for (double k : o.pass_k)
    if (!(k >= 1 && k <= double(o.samples) && k == double(int64_t(k))))
      fail("{}: {} is not allowed; allowed: integers in [1, eval.samples = {}]", r.key_path("pass_k"), k, o.samples);
  for (double p : o.fast_p)
    if (!(p > 0 && p < 1e6)) fail("{}: {} is not allowed; allowed: speedups > 0", r.key_path("fast_p"), p);
}

template <typename T>
void read_section(ConfigReader& r, T& o) {
  read_described(r, o);
  check(r, o);
}

// Combinations every key of which is valid alone but that the trainer cannot run: refused when the
// config is read, not after the first rollout step.
void refuse_settings_that_cannot_run(const TrainConfig& c) {
  if (c.estimator == "gae") {
    std::vector<std::string> usable;
    for (const std::string& name : advantage_estimator_names())
      if (name != "gae") usable.push_back(name);
    fail("advantage.estimator: 'gae' needs critic values (TurnBatch::values) and the trainer has no critic; allowed "
         "with turnrl train: {} (gae is for loops that fill values themselves, examples/estimators.cpp)",
         fmt::join(usable, ", "));
  }
  if (c.trainer.rollout_waves > 1) {
    // Overlap is only sound where the evaluator's timings cannot see the policy's sampling.
    const EvaluatorConfig& e = c.evaluator;
    const auto& gpus = e.cuda.devices;
    std::string shared;
    if (e.backend == "cpu" && c.model.device == "cpu") shared = "the CPU cores the policy samples on";
    if (e.backend == "cuda" && c.model.device == "cuda" && (gpus.empty() || std::count(gpus.begin(), gpus.end(), 0)))
      shared = "GPU 0, where the policy samples (evaluator.cuda.devices [] means every GPU)";
    if (e.backend == "python" && e.python.device != (c.model.device == "cuda" ? "cpu" : "cuda"))
      shared = fmt::format("the policy's device (evaluator.python.device '{}', model.device '{}')", e.python.device,
                           c.model.device);
    if (!shared.empty())
      fail("trainer.rollout_waves: {} overlaps evaluation with sampling, but evaluator.backend '{}' would time "
           "candidates on {}, so the policy's load would enter every speedup; allowed: 1, or >= 2 with an evaluator "
           "that measures elsewhere (evaluator.backend remote; cuda with evaluator.cuda.devices listing GPUs other "
           "than 0; python with evaluator.python.device other than model.device)",
           c.trainer.rollout_waves, e.backend, shared);
  }
  const std::string suite = builtin_task_backend(c.evaluator);
  if (c.tasks.source == "builtin" && suite != "cpu" && suite != "cuda")
    fail("tasks.source: 'builtin' has no task suite for evaluator.backend '{}'{}; allowed: the cpu or cuda suite "
         "(evaluator.backend cpu or cuda, or remote with evaluator.remote.worker_backend cpu or cuda), or "
         "tasks.source: file",
         c.evaluator.backend,
         c.evaluator.backend == "remote" ? fmt::format(" (evaluator.remote.worker_backend '{}')", suite) : "");
}

}  // namespace

TrainConfig parse_config(const YAML::Node& root) {
  TrainConfig c;
  ConfigReader r(root, "");
  r.section("run", [&](ConfigReader& s) { read_options(s, c.run); });
  r.section("trainer", [&](ConfigReader& s) { read_options(s, c.trainer); });
  r.section("optimizer", [&](ConfigReader& s) { read_options(s, c.optimizer); });
  r.section("checkpoint", [&](ConfigReader& s) { read_options(s, c.checkpoint); });
  r.section("distributed", [&](ConfigReader& s) { read_options(s, c.distributed); });
  r.section("model", [&](ConfigReader& s) { read_options(s, c.model); });
  r.section("sampling", [&](ConfigReader& s) { read_options(s, c.sampling); });
  r.section("tasks", [&](ConfigReader& s) { read_section(s, c.tasks); });
  r.section("env", [&](ConfigReader& s) { read_options(s, c.env); });
  r.section("evaluator", [&](ConfigReader& s) { read_evaluator_config(s, c.evaluator); });
  r.section("reward", [&](ConfigReader& s) { read_options(s, c.reward); });
  r.section("rejection", [&](ConfigReader& s) { read_options(s, c.rejection); });
  r.section("returns", [&](ConfigReader& s) { read_options(s, c.returns); });
  r.section("advantage", [&](ConfigReader& s) {
    s.choice("estimator", c.estimator, advantage_estimator_names());
    read_options(s, c.advantage);
  });
  r.section("mismatch", [&](ConfigReader& s) { read_options(s, c.mismatch); });
  r.section("policy_loss", [&](ConfigReader& s) { read_options(s, c.policy_loss); });
  r.section("eval", [&](ConfigReader& s) { read_section(s, c.eval); });
  r.finish();
  refuse_settings_that_cannot_run(c);
  return c;
}

TrainConfig load_config(const std::string& file, const std::vector<std::string>& overrides) {
  return load_config_file(file, overrides, [](const YAML::Node& root) { return parse_config(root); });
}

std::string config_to_yaml(const TrainConfig& c, bool annotate) {
  ConfigWriter w(annotate);
  if (annotate)
    w.raw("# turnrl training config: every key with its default. Reference: docs/configuration.md");
  write_options_section(w, "run", "Where the run writes: resolved config, metrics.jsonl, samples.jsonl, checkpoints/.", c.run);
  write_options_section(w, "trainer", "RL loop sizes.", c.trainer);
  write_options_section(w, "optimizer", kOptimizerSectionHelp, c.optimizer);
  write_options_section(w, "checkpoint", kCheckpointSectionHelp, c.checkpoint);
  write_options_section(w, "distributed", "Data parallel over ranks from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (turnrl train --nproc N).", c.distributed);
  write_options_section(w, "model", kModelSectionHelp, c.model);
  write_options_section(w, "sampling", "Rollout sampling (rollout log-probs are recorded under it).", c.sampling);
  write_options_section(w, "tasks", "Which tasks train.", c.tasks);
  write_options_section(w, "env", "The multi-turn kernel environment (kernels/kernel_env.h).", c.env);
  w.open("evaluator", "The kernel evaluator (kernels/backends.h, docs/evaluator.md).");
  write_evaluator_config(w, c.evaluator);
  w.close();
  write_options_section(w, "reward", "Turn reward (kernels/kernel_reward.h, docs/rewards.md).", c.reward);
  write_options_section(w, "rejection", "Meaningful-turn mask, PRS, group filters (algo/rejection.h).", c.rejection);
  write_options_section(w, "returns", "Per-turn returns (algo/returns.h).", c.returns);
  w.open("advantage", "Advantage estimator (algo/advantage.h).");
  w.key("estimator", c.estimator, fmt::format("{}", fmt::join(advantage_estimator_names(), " | ")));
  write_options(w, c.advantage);
  w.close();
  write_options_section(w, "mismatch", "Rollout/trainer mismatch correction (algo/mismatch.h).", c.mismatch);
  write_options_section(w, "policy_loss", "PPO loss (algo/policy_loss.h).", c.policy_loss);
  write_options_section(w, "eval", "`turnrl eval`: sampling and statistics.", c.eval);
  return w.str();
}

std::string default_config_yaml() { return config_to_yaml(TrainConfig{}, true); }

}  // namespace turnrl
