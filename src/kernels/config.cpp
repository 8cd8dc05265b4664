#include "turnrl/kernels/config.h"

#include <fmt/format.h>

#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"

namespace turnrl {
namespace {

// One description per options struct (gemma.cpp's ForEach): each field named once with its range
// and help text. FieldReader reads the fields strictly from YAML, FieldWriter prints them (the
// resolved config.yaml and `turnrl config --print-defaults`, which docs/configuration.md shows);
// checks across fields follow in check().
template <typename V>
void describe(V& v, RunConfig& o) {
  v.text("dir", o.dir, "run directory (created)");
  v.integer("samples_per_step", o.samples_per_step, 0, 1 << 20, "episodes per step written to samples.jsonl; >= 0");
  v.flag("progress", o.progress, "progress line on stderr");
}

template <typename V>
void describe(V& v, TrainerConfig& o) {
  v.integer("steps", o.steps, 1, int64_t(1) << 40, "RL steps; >= 1");
  v.integer("tasks_per_step", o.tasks_per_step, 1, 1 << 20, "B: tasks (prompts) per step; >= 1");
  v.integer("samples_per_task", o.samples_per_task, 1, 1 << 20, "n: episodes per task (group size); >= 1");
  v.integer("ppo_epochs", o.ppo_epochs, 1, 1000, "optimizer steps per RL step over the whole batch; >= 1");
  v.integer("micro_batch_size", o.micro_batch_size, 1, int64_t(1) << 30, "turns per forward/backward (gradient accumulation)");
  v.integer("seed", o.seed, 0, INT64_MAX, "model init, task order, sampling and PRS draws");
  v.integer("threads", o.threads, 0, 4096, "LibTorch intra-op threads; 0 = LibTorch default");
}

template <typename V>
void describe(V& v, OptimizerConfig& o) {
  v.number("lr", o.lr, 0.0, 10.0, "peak learning rate; [0, 10]");
  v.unit_pair("betas", o.beta1, o.beta2, "Adam betas; each in [0, 1)");
  v.number("eps", o.eps, 0.0, 1.0, "Adam epsilon");
  v.number("weight_decay", o.weight_decay, 0.0, 10.0, "decoupled weight decay; [0, 10]");
  v.choice("schedule", o.schedule, {"constant", "cosine"}, "constant | cosine");
  v.integer("warmup_steps", o.warmup_steps, 0, int64_t(1) << 40, "optimizer steps of linear warm-up; 0 = none");
  v.number("min_lr_ratio", o.min_lr_ratio, 0.0, 1.0, "cosine: final lr / lr; [0, 1]");
  v.number("grad_clip", o.grad_clip, 0.0, 1e12, "max global gradient norm; 0 = off");
}

template <typename V>
void describe(V& v, CheckpointConfig& o) {
  v.integer("every", o.every, 0, int64_t(1) << 40, "steps between checkpoints; 0 = only at the end");
  v.integer("keep_last", o.keep_last, 1, 1 << 20, "complete checkpoints kept; >= 1");
  v.flag("on_stop", o.on_stop, "SIGINT/SIGTERM: checkpoint the last finished step, then exit");
}

template <typename V>
void describe(V& v, DistributedConfig& o) {
  v.choice("backend", o.backend, {"auto", "nccl", "tcp"}, "auto | nccl | tcp; auto = nccl for model.device cuda when built with NCCL");
  v.number("bucket_mb", o.bucket_mb, 1e-3, 1 << 20, "gradient all-reduce bucket size in MiB; > 0");
  v.number("timeout_seconds", o.timeout_seconds, 1.0, 1e7, "rendezvous and collective deadline; >= 1");
}

template <typename V>
void describe(V& v, ModelConfig& o) {
  v.integer("d_model", o.d_model, 2, 1 << 16, "residual width; d_model / heads must be even");
  v.integer("layers", o.layers, 1, 1024, "decoder blocks");
  v.integer("heads", o.heads, 1, 1024, "attention heads");
  v.integer("ffn", o.ffn, 0, 1 << 20, "SwiGLU width; 0 = 8/3 d_model rounded up to 64");
  v.integer("max_seq", o.max_seq, 16, 1 << 20, "longest sequence; >= 16");
  v.choice("device", o.device, {"cpu", "cuda"}, "cpu | cuda");
  v.text("init", o.init, "model file to start from; \"\" = fresh weights");
}

template <typename V>
void describe(V& v, RolloutSamplingConfig& o) {
  v.number("temperature", o.temperature, 1e-3, 100.0, "> 0");
  v.integer("top_k", o.top_k, 0, 1 << 20, "0 = off");
  v.number("top_p", o.top_p, 1e-6, 1.0, "(0, 1]; 1 = off");
  v.integer("max_new_tokens", o.max_new_tokens, 1, 1 << 20, "response tokens per turn (env.action: code)");
}

template <typename V>
void describe(V& v, TasksConfig& o) {
  v.choice("source", o.source, {"builtin", "file"}, "builtin | file");
  v.text("file", o.file, "JSON Lines task file (source: file)");
  v.texts("include", o.include, "task ids; [] = every task with a plan template");
  v.number("validation_fraction", o.validation_fraction, 0.0, 1.0, "share held out for eval; [0, 1]");
  v.integer("split_seed", o.split_seed, 0, INT64_MAX, "seed of the hash split");
}

template <typename V>
void describe(V& v, EvalConfig& o) {
  v.integer("samples", o.samples, 1, 1 << 20, "episodes per task");
  v.number("temperature", o.temperature, 1e-3, 100.0, "> 0");
  v.number("top_p", o.top_p, 1e-6, 1.0, "(0, 1]");
  v.numbers("pass_k", o.pass_k, "pass@k for these k; integers in [1, samples]");
  v.numbers("fast_p", o.fast_p, "fast@p thresholds");
  v.choice("split", o.split, {"all", "validation", "train"}, "all | validation | train");
  v.integer("seed", o.seed, 0, INT64_MAX, "sampling seed");
}

// Checks across the fields of a section, after reading (r names the keys).
template <typename T>
void check(const ConfigReader&, const T&) {}

void check(const ConfigReader& r, const RunConfig& o) {
  if (o.dir.empty()) fail("{}: the run directory must not be empty", r.key_path("dir"));
}

void check(const ConfigReader& r, const ModelConfig& o) {
  if (o.d_model % o.heads != 0 || (o.d_model / o.heads) % 2 != 0)
    fail("{}: {} heads do not split d_model {} into even head widths (rotary positions); allowed: d_model / heads "
         "an even integer",
         r.key_path("heads"), o.heads, o.d_model);
}

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

// Reads described fields through a ConfigReader (strict: types, ranges, allowed words).
struct FieldReader {
  ConfigReader& r;
  void integer(const char* key, int64_t& v, int64_t lo, int64_t hi, const char*) { r.integer(key, v, lo, hi); }
  void number(const char* key, double& v, double lo, double hi, const char*) { r.number(key, v, lo, hi); }
  void flag(const char* key, bool& v, const char*) { r.flag(key, v); }
  void text(const char* key, std::string& v, const char*) { r.text(key, v); }
  void choice(const char* key, std::string& v, const std::vector<std::string>& allowed, const char*) { r.choice(key, v, allowed); }
  void numbers(const char* key, std::vector<double>& v, const char*) { r.numbers(key, v); }
  void texts(const char* key, std::vector<std::string>& v, const char*) { r.texts(key, v); }
  // Two numbers in [0, 1) written as one list (Adam's betas).
  void unit_pair(const char* key, double& first, double& second, const char*) {
    std::vector<double> pair = {first, second};
    r.numbers(key, pair);
    if (pair.size() != 2 || !(pair[0] >= 0 && pair[0] < 1) || !(pair[1] >= 0 && pair[1] < 1))
      fail("{}: expected two numbers in [0, 1), got [{}]", r.key_path(key), fmt::join(pair, ", "));
    first = pair[0], second = pair[1];
  }
};

template <typename T>
void read_section(ConfigReader& r, T& o) {
  FieldReader reader{r};
  describe(reader, o);
  check(r, o);
}

void read_section(ConfigReader& r, EvaluatorConfig& o) { read_evaluator_config(r, o); }

// Reads one top-level section with `read` and rejects its unknown keys.
template <typename Fn>
void section(ConfigReader& root, const std::string& name, Fn&& read) {
  ConfigReader r = root.section(name);
  read(r);
  r.finish();
}

// --- writing ------------------------------------------------------------------------------

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out + "\"";
}

std::string value(double v) { return fmt::format("{}", v); }
std::string value(int64_t v) { return fmt::format("{}", v); }
std::string value(int v) { return fmt::format("{}", v); }
std::string value(bool v) { return v ? "true" : "false"; }
std::string value(const std::string& v) { return quoted(v); }
std::string value(const char* v) { return v; }  // enum names: plain YAML words
std::string value(const std::vector<double>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }
std::string value(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }
std::string value(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const auto& s : v) q.push_back(quoted(s));
  return fmt::format("[{}]", fmt::join(q, ", "));
}

class Writer {
 public:
  explicit Writer(bool annotate) : annotate_(annotate) {}
  void open(const std::string& name, const std::string& comment) {
    if (depth_ == 0 && !out_.empty()) out_ += "\n";
    if (annotate_ && depth_ == 0) out_ += "# " + comment + "\n";
    out_ += indent() + name + ":";
    if (annotate_ && depth_ > 0) out_ += "  # " + comment;
    out_ += "\n";
    ++depth_;
  }
  void close() { --depth_; }
  template <typename T>
  void key(const std::string& name, const T& v, const std::string& comment) {
    std::string line = indent() + name + ": " + value(v);
    if (annotate_) line += std::string(line.size() < 40 ? 40 - line.size() : 1, ' ') + "# " + comment;
    out_ += line + "\n";
  }
  void comment(const std::string& text) {
    if (annotate_) out_ += indent() + "# " + text + "\n";
  }
  void raw(const std::string& line) { out_ += indent() + line + "\n"; }
  const std::string& str() const { return out_; }

 private:
  std::string indent() const { return std::string(2 * depth_, ' '); }
  bool annotate_;
  int depth_ = 0;
  std::string out_;
};

// Prints described fields: choices as plain YAML words, texts quoted.
struct FieldWriter {
  Writer& w;
  void integer(const char* key, int64_t& v, int64_t, int64_t, const char* help) { w.key(key, v, help); }
  void number(const char* key, double& v, double, double, const char* help) { w.key(key, v, help); }
  void flag(const char* key, bool& v, const char* help) { w.key(key, v, help); }
  void text(const char* key, std::string& v, const char* help) { w.key(key, v, help); }
  void choice(const char* key, std::string& v, const std::vector<std::string>&, const char* help) { w.key(key, v.c_str(), help); }
  void numbers(const char* key, std::vector<double>& v, const char* help) { w.key(key, v, help); }
  void texts(const char* key, std::vector<std::string>& v, const char* help) { w.key(key, v, help); }
  void unit_pair(const char* key, double& first, double& second, const char* help) {
    w.key(key, std::vector<double>{first, second}, help);
  }
};

// A described section: its comment line, then its fields.
template <typename T>
void write_section(Writer& w, const char* name, const char* comment, T options) {
  w.open(name, comment);
  FieldWriter fields{w};
  describe(fields, options);
  w.close();
}

const char* singleton_name(SingletonAdvantage v) { return v == SingletonAdvantage::raw_return ? "raw_return" : "zero"; }
const char* grouping_name(Grouping v) { return v == Grouping::turn ? "turn" : "trajectory"; }

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
  section(r, "run", [&](ConfigReader& s) { read_section(s, c.run); });
  section(r, "trainer", [&](ConfigReader& s) { read_section(s, c.trainer); });
  section(r, "optimizer", [&](ConfigReader& s) { read_section(s, c.optimizer); });
  section(r, "checkpoint", [&](ConfigReader& s) { read_section(s, c.checkpoint); });
  section(r, "distributed", [&](ConfigReader& s) { read_section(s, c.distributed); });
  section(r, "model", [&](ConfigReader& s) { read_section(s, c.model); });
  section(r, "sampling", [&](ConfigReader& s) { read_section(s, c.sampling); });
  section(r, "tasks", [&](ConfigReader& s) { read_section(s, c.tasks); });
  section(r, "env", [&](ConfigReader& s) { read_options(s, c.env); });
  section(r, "evaluator", [&](ConfigReader& s) { read_section(s, c.evaluator); });
  section(r, "reward", [&](ConfigReader& s) { read_options(s, c.reward); });
  section(r, "rejection", [&](ConfigReader& s) { read_options(s, c.rejection); });
  section(r, "returns", [&](ConfigReader& s) { read_options(s, c.returns); });
  section(r, "advantage", [&](ConfigReader& s) {
    s.choice("estimator", c.estimator, advantage_estimator_names());
    read_options(s, c.advantage);
  });
  section(r, "mismatch", [&](ConfigReader& s) { read_options(s, c.mismatch); });
  section(r, "policy_loss", [&](ConfigReader& s) { read_options(s, c.policy_loss); });
  section(r, "eval", [&](ConfigReader& s) { read_section(s, c.eval); });
  r.finish();
  refuse_settings_that_cannot_run(c);
  return c;
}

void apply_override(YAML::Node& root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--set '{}': expected key.path=value (e.g. --set trainer.steps=10)", assignment);
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts)
    if (p.empty()) fail("--set '{}': empty component in the key path '{}'", assignment, path);
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  YAML::Node node;
  node.reset(root);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = node[parts[i]];
    if (!next || next.IsNull()) next = YAML::Node(YAML::NodeType::Map);
    if (!next.IsMap())
      fail("--set '{}': '{}' is not a section", assignment, fmt::join(parts.begin(), parts.begin() + i + 1, "."));
    node[parts[i]] = next;
    node.reset(next);
  }
  node[parts.back()] = parse_yaml(text.empty() ? "\"\"" : text, "--set " + path);
}

TrainConfig load_config(const std::string& file, const std::vector<std::string>& overrides) {
  YAML::Node root = file.empty() ? YAML::Node(YAML::NodeType::Map) : load_yaml_file(file);
  for (const auto& o : overrides) apply_override(root, o);
  try {
    return parse_config(root);
  } catch (const Error& e) {
    // Errors start with the key path they are about: one an override set is that --set's error.
    const std::string what = e.what();
    for (const auto& o : overrides) {
      const std::string path = o.substr(0, o.find('='));
      if (what.compare(0, path.size() + 1, path + ":") == 0 || what.compare(0, path.size() + 1, path + ".") == 0)
        throw Error(fmt::format("--set '{}': {}", o, what));
    }
    if (file.empty()) throw;
    throw Error(fmt::format("{}: {}", file, what));
  }
}

std::string config_to_yaml(const TrainConfig& c, bool annotate) {
  Writer w(annotate);
  if (annotate)
    w.raw("# turnrl training config: every key with its default. Reference: docs/configuration.md");

  write_section(w, "run", "Where the run writes: resolved config, metrics.jsonl, samples.jsonl, checkpoints/.", c.run);

  write_section(w, "trainer", "RL loop sizes.", c.trainer);

  write_section(w, "optimizer", "AdamW with linear warm-up, then constant or cosine decay.", c.optimizer);

  write_section(w, "checkpoint", "Atomic checkpoints under run.dir/checkpoints/step_NNNNNNNN.", c.checkpoint);

  write_section(w, "distributed", "Data parallel over ranks from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (turnrl train --nproc N).", c.distributed);

  write_section(w, "model", "The built-in policy: a small decoder-only transformer.", c.model);

  write_section(w, "sampling", "Rollout sampling (rollout log-probs are recorded under it).", c.sampling);

  write_section(w, "tasks", "Which tasks train.", c.tasks);

  w.open("env", "The multi-turn kernel environment (env/kernel_env.h).");
  w.key("max_turns", c.env.max_turns, "T: turns per episode; [1, 64]");
  w.key("target_speedup", c.env.target_speedup.value_or(0.0), "stop once correct with speedup >= this; 0 = off");
  w.key("action", to_string(c.env.action), "plan (kernel plans) | code (a fenced code block, chat codec)");
  w.key("feedback_chars", int64_t(c.env.feedback_chars), "feedback messages trimmed to this");
  w.key("correctness_trials", c.env.correctness_trials, "correctness runs per evaluation");
  w.key("timing_trials", c.env.timing_trials, "timed runs per evaluation");
  w.key("seed", int64_t(c.env.seed), "evaluation input seed; 0 = fresh seeds every evaluation");
  w.key("system_prompt", c.env.system_prompt, "system message of code-writing policies");
  w.close();

  const EvaluatorConfig& ev = c.evaluator;
  w.open("evaluator", "The kernel evaluator (eval/backends.h, docs/evaluator.md).");
  w.key("backend", ev.backend.c_str(), "cpu | cuda | python | remote (built here: " + fmt::format("{}", fmt::join(built_evaluator_backends(), ", ")) + ")");
  w.key("workers", ev.workers, "worker processes; 0 = one per core (cpu, python on cpu) or per GPU");
  w.key("cache_dir", ev.cache_dir, "compiled-candidate cache; \"\" = default");
  w.key("compile_seconds", ev.compile_seconds, "compiler time limit");
  w.key("warmup", ev.warmup, "untimed runs before timing");
  w.key("wall_seconds", ev.wall_seconds, "per worker call, then the worker is killed");
  w.key("sandbox", ev.sandbox.c_str(), "namespaces | rlimits-only (weaker: no file-system isolation; docs/evaluator.md)");
  w.open("cuda", "backend cuda: NVRTC + CUDA events + CUPTI");
  w.key("devices", ev.cuda.devices, "GPU ordinals, one worker each; [] = every visible GPU");
  w.key("l2_flush_mib", ev.cuda.l2_flush_mib, "L2 flush buffer; 0 = twice the L2 size");
  w.close();
  w.open("python", "backend python: KernelBench-format tasks, persistent Python workers");
  w.key("executable", ev.python.executable, "interpreter with torch; \"\" = $TURNRL_PYTHON, else python3 on PATH");
  w.key("device", ev.python.device.c_str(), "cpu | cuda | auto");
  w.key("tasks_file", ev.python.tasks_file, "JSON Lines task file");
  w.key("startup_seconds", ev.python.startup_seconds, "start-up limit of a fresh worker");
  w.close();
  w.open("remote", "backend remote: a Redis stream served by `turnrl eval-worker`");
  w.key("redis_url", ev.remote.redis_url, "redis://host:port");
  w.key("worker_backend", ev.remote.worker_backend.c_str(), "cpu | cuda | python: what the eval-workers run; picks the built-in task suite");
  w.key("stream", ev.remote.stream, "request stream name");
  w.key("deadline_seconds", ev.remote.deadline_seconds, "per request; then a timeout result");
  w.key("visibility_timeout_seconds", ev.remote.visibility_timeout_seconds, "unacknowledged work is reclaimed after this");
  w.key("result_ttl_seconds", ev.remote.result_ttl_seconds, "stored results expire after this");
  w.key("max_deliveries", ev.remote.max_deliveries, "a request delivered more often is answered as a crash");
  w.key("cached_reference_timing", ev.remote.cached_reference_timing, "cpu: reference timed once per task and device kind");
  w.key("reference_ttl_seconds", ev.remote.reference_ttl_seconds, "cached reference timings expire after this");
  w.close();
  w.close();

  const KernelRewardOptions& rw = c.reward;
  w.open("reward", "Turn reward (reward/kernel_reward.h, docs/rewards.md).");
  w.key("function", to_string(rw.function), "speedup | weighted | like_kernel");
  w.key("correct_weight", rw.correct_weight, "w_c; [0, 100]");
  w.key("speedup_weight", rw.speedup_weight, "w_p; [0, 100]");
  w.key("speedup_form", to_string(rw.speedup_form), "linear | log");
  w.key("speedup_upper_bound", rw.speedup_upper_bound, "speedup clipped to this; >= 1");
  w.key("speedup_lower_bound", rw.speedup_lower_bound, "speedups below score 0; >= 0");
  w.key("speedup_epsilon", rw.speedup_epsilon, "weighted: bonus needs s >= 1 + eps");
  w.open("coverage", "profiling-based reward (PR)");
  w.key("enabled", rw.coverage_enabled, "add coverage_weight * coverage for correct turns");
  w.key("weight", rw.coverage_weight, "[0, 100]");
  w.key("threshold", rw.coverage_threshold, "coverage below this adds nothing; [0, 1]");
  w.key("source", to_string(rw.coverage_source), "true_share | reference | kernel_count");
  w.close();
  bool any_penalty = false;
  for (auto o : {RewardOutcome::format, RewardOutcome::compile, RewardOutcome::runtime, RewardOutcome::incorrect,
                 RewardOutcome::hacking}) {
    const bool set = (o == RewardOutcome::format && rw.format_penalty) || (o == RewardOutcome::compile && rw.compile_penalty) ||
                     (o == RewardOutcome::runtime && rw.runtime_penalty) ||
                     (o == RewardOutcome::incorrect && rw.incorrect_penalty) || (o == RewardOutcome::hacking && rw.hacking_penalty);
    if (!set) continue;
    if (!any_penalty) w.open("penalties", "reward of failed turns; unset keys take the function's default");
    any_penalty = true;
    w.key(to_string(o), rw.penalty(o), "[-100, 100]");
  }
  if (any_penalty) {
    w.close();
  } else {
    w.comment("penalties: {format, compile, runtime, incorrect, hacking}: failed turns' rewards in [-100, 100];");
    w.comment("unset keys take the function's default (0 for speedup/weighted)");
    w.raw("penalties: {}");
  }
  std::vector<double> mins, rewards;
  for (const SpeedupTier& t : rw.tiers) mins.push_back(t.min_speedup), rewards.push_back(t.reward);
  w.open("tiers", "like_kernel: stepped rewards by speedup");
  w.key("min_speedup", mins, "tier thresholds, descending");
  w.key("reward", rewards, "reward of each tier");
  w.key("below", rw.below_tiers_reward, "correct but below every tier");
  w.close();
  w.close();

  const RejectionOptions& rj = c.rejection;
  w.open("rejection", "Meaningful-turn mask, PRS, group filters (reward/rejection.h).");
  w.key("mask_void_turns", rj.mask_void_turns, "mask turns with reward <= 0 after a success");
  w.key("truncation", to_string(rj.truncation), "keep | reject_turn | mask_trajectory");
  w.open("prs", "profiling-based rejection sampling");
  w.key("enabled", rj.prs.enabled, "PRS on/off");
  w.key("level", to_string(rj.prs.level), "turn | geometric");
  w.key("threshold", rj.prs.threshold, "p_keep = clamp((c - threshold) / factor, 0, 1); [0, 1]");
  w.key("factor", rj.prs.factor, "[0, 1]; 0 = a step at threshold");
  w.key("speedup_threshold", rj.prs.speedup_threshold, "also keep when speedup >= this; -1 = off");
  w.key("round_coverage", rj.prs.round_coverage, "round coverage to 2 decimals first");
  w.key("coverage_source", to_string(rj.prs.coverage_source), "true_share | reference | kernel_count");
  w.close();
  w.open("group_filter", "whole-group filters before the advantage");
  w.key("min_last_turn_std", rj.groups.min_last_turn_std, "drop groups whose last-turn reward std is below; 0 = off");
  w.key("drop_all_equal", rj.groups.drop_all_equal, "drop groups with identical reward sequences");
  w.key("min_group_size", rj.groups.min_group_size, "0 = n/2 + 1");
  w.key("group_size", rj.groups.group_size, "n; 0 = the largest group");
  w.key("target_groups", rj.groups.target_groups, "the built-in trainer needs 0 (train on every survivor)");
  w.key("max_sampling_rounds", rj.groups.max_sampling_rounds, ">= 1");
  w.key("seed", int64_t(rj.groups.seed), "selection seed");
  w.close();
  w.close();

  w.open("returns", "Per-turn returns (algo/returns.h).");
  w.key("mode", to_string(c.returns.mode), "reward_to_go | outcome | residual");
  w.key("gamma", c.returns.gamma, "[0, 1]");
  w.key("unbiased_shaping", c.returns.unbiased_shaping, "residual: scale the last reward by 1 - gamma");
  w.close();

  w.open("advantage", "Advantage estimator (algo/advantage.h).");
  w.key("estimator", c.estimator, fmt::format("{}", fmt::join(advantage_estimator_names(), " | ")));
  w.key("singleton", singleton_name(c.advantage.singleton), "raw_return | zero: a group of one");
  w.key("grouping", grouping_name(c.advantage.grouping), "turn | trajectory (grpo, dr_grpo)");
  w.key("std_epsilon", c.advantage.std_epsilon, "grpo");
  w.key("gamma", c.advantage.gamma, "gae");
  w.key("lambda", c.advantage.lambda, "gae");
  w.key("whiten", c.advantage.whiten, "gae");
  w.key("check_finite", c.advantage.check_finite, "reject NaN/inf returns");
  w.close();

  const MismatchOptions& m = c.mismatch;
  w.open("mismatch", "Rollout/trainer mismatch correction (algo/mismatch.h).");
  w.key("is_level", to_string(m.is_level), "off | token | turn | turn_geo | sequence | geometric");
  w.key("is_cap", m.is_cap, "truncated IS cap");
  w.key("rs_level", to_string(m.rs_level), "rejection level; same names");
  w.key("rs_lower", m.rs_lower, "keep ratios in [rs_lower, rs_upper]");
  w.key("rs_upper", m.rs_upper, "upper end of the band");
  w.key("rs_k3_level", to_string(m.rs_k3_level), "k3 (KL estimate) rejection level; same names");
  w.key("rs_k3_upper", m.rs_k3_upper, "keep where the level's k3 is <= this");
  w.key("veto_threshold", m.veto_threshold, "reject a turn with a token ratio below; 0 = off");
  w.key("bypass", m.bypass, "use rollout_logp as old_logp (no recompute pass)");
  w.key("check_finite", m.check_finite, "throw on NaN log-probs");
  w.key("fused", m.fused, "CPU two-pass implementation");
  w.close();

  const PPOLossOptions& p = c.policy_loss;
  w.open("policy_loss", "PPO loss (algo/policy_loss.h).");
  w.key("clip_low", p.clip_low, "epsilon_low; [0, 1)");
  w.key("clip_high", p.clip_high, "epsilon_high (clip-higher)");
  w.key("dual_clip", p.dual_clip, "c > 1; 0 = off");
  w.key("agg_mode", to_string(p.agg_mode),
        "token-mean | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm | seq-sum-no-norm");
  w.key("loss_scale_factor", p.loss_scale_factor, "the aggregated loss is divided by this");
  w.key("norm_length", p.norm_length, "seq-mean-token-sum-norm divisor; 0 = padded width");
  w.key("entropy_coef", p.entropy_coef, "entropy bonus");
  w.key("kl_loss_coef", p.kl_loss_coef, "the built-in trainer needs 0 (no reference policy)");
  w.key("kl_type", to_string(p.kl_type), "kl | abs | mse | low_var_kl");
  w.key("fused", p.fused, "hand-written backward");
  w.close();

  write_section(w, "eval", "`turnrl eval`: sampling and statistics.", c.eval);
  return w.str();
}

std::string default_config_yaml() { return config_to_yaml(TrainConfig{}, true); }

}  // namespace turnrl
