#include "turnrl/kernels/kernel_env.h"

#include <map>

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/kernels/eval_codec.h"
#include "turnrl/rl/metrics.h"
#include "../core/utf8.h"

namespace turnrl {

const char* to_string(ActionFormat v) { return v == ActionFormat::code ? "code" : "plan"; }

// The config reader has checked the word against the allowed ones.
static ActionFormat parse_action_format(const std::string& name, const std::string&) {
  return name == "code" ? ActionFormat::code : ActionFormat::plan;
}

template <typename V>
static void describe(V& v, KernelEnvOptions& o) {
  v.integer("max_turns", o.max_turns, 1, 64, "T: turns per episode; [1, 64]");
  v.number_or_off("target_speedup", o.target_speedup, 0.0, 1e6, "stop once correct with speedup >= this; 0 = off");
  v.choice("action", o.action, {"code", "plan"}, parse_action_format,
           "plan (kernel plans) | code (a fenced code block, chat codec)");
  v.integer("feedback_chars", o.feedback_chars, 64, 1 << 20, "feedback messages trimmed to this");
  v.integer("correctness_trials", o.correctness_trials, 1, 1000, "correctness runs per evaluation");
  v.integer("timing_trials", o.timing_trials, 1, 100000, "timed runs per evaluation");
  v.integer("seed", o.seed, 0, INT64_MAX, "evaluation input seed; 0 = fresh seeds every evaluation");
  v.text("system_prompt", o.system_prompt, "system message of code-writing policies");
}

void read_options(ConfigReader& r, KernelEnvOptions& o) { read_described(r, o); }

void write_options(ConfigWriter& w, const KernelEnvOptions& o) { write_described(w, o); }

Extraction extract_candidate(const std::string& response, const std::vector<std::string>& languages) {
  // Find the last complete ``` ... ``` pair; the opening fence's line carries the tag.
  Extraction out;
  const std::string fence = "```";
  size_t pos = 0, open = std::string::npos, close = std::string::npos;
  while (true) {
    const size_t a = response.find(fence, pos);
    if (a == std::string::npos) break;
    const size_t b = response.find(fence, a + fence.size());
    if (b == std::string::npos) break;
    open = a, close = b;
    pos = b + fence.size();
  }
  const std::string expected = languages.empty() ? std::string("a language") : fmt::format("```{}", languages.front());
  if (open == std::string::npos) {
    out.error = fmt::format("no fenced code block found; put the complete source in one {} ... ``` block", expected);
    return out;
  }
  const size_t tag_end = response.find('\n', open);
  if (tag_end == std::string::npos || tag_end > close) {
    out.error = "the code block is empty";
    return out;
  }
  std::string tag = response.substr(open + fence.size(), tag_end - open - fence.size());
  while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\r')) tag.pop_back();
  while (!tag.empty() && tag.front() == ' ') tag.erase(tag.begin());
  if (!languages.empty() && std::find(languages.begin(), languages.end(), tag) == languages.end()) {
    out.error = tag.empty() ? fmt::format("the last code block has no language tag; expected {}", expected)
                            : fmt::format("the last code block is tagged '{}'; expected {}", tag, expected);
    return out;
  }
  out.code = response.substr(tag_end + 1, close - tag_end - 1);
  if (out.code.find_first_not_of(" \t\r\n") == std::string::npos) {
    out.error = "the code block is empty";
    return out;
  }
  out.ok = true;
  return out;
}

namespace {

std::string trim_middle(const std::string& s, size_t limit) {
  if (s.size() <= limit) return s;
  const size_t head = limit * 2 / 3, tail = limit - head;
  return s.substr(0, head) + fmt::format("\n... [{} characters cut] ...\n", s.size() - head - tail) +
         s.substr(s.size() - tail);
}

std::string status_line(const EvalResult& e) {
  if (e.hacked() || e.error == EvalError::hacking) return "rejected: reward hacking detected";
  if (e.correct) return "correct";
  switch (e.error) {
    case EvalError::format: return "no valid candidate in your answer";
    case EvalError::compile: return "compilation failed";
    case EvalError::load: return "compiled, but the entry point could not be loaded";
    case EvalError::runtime: return "runtime error";
    case EvalError::crash: return "the kernel crashed";
    case EvalError::timeout: return "time limit exceeded";
    case EvalError::memory: return "memory limit exceeded";
    case EvalError::output_limit: return "printed too much output";
    case EvalError::shape: return "incorrect: output shape differs from the reference";
    case EvalError::mismatch: return "incorrect: values differ from the reference";
    case EvalError::nonfinite: return "incorrect: NaN or inf in the output";
    case EvalError::internal: return "the evaluator failed (not your fault)";
    default: return "not accepted";
  }
}

}  // namespace

std::string render_feedback(const EvalResult& e, const KernelReward& reward, size_t message_chars) {
  std::string out = fmt::format("status: {}\n", status_line(e));
  if (!e.message.empty()) out += fmt::format("error ({}): {}\n", to_string(e.error), trim_middle(e.message, message_chars));
  if (e.failing_index >= 0 || e.error == EvalError::mismatch)
    out += fmt::format("first mismatching element: flat index {}; max abs error {:.3g}, max rel error {:.3g}\n",
                       e.failing_index, e.max_abs_error, e.max_rel_error);
  if (e.correct && e.candidate_time.trials > 0)
    out += fmt::format("speedup: {:.2f}x (reference {:.1f} us, yours {:.1f} us; medians of {} trials)\n", e.speedup,
                       e.reference_time.median_us, e.candidate_time.median_us, e.candidate_time.trials);
  if (e.stage >= EvalStage::profiled || !e.profile.empty()) {
    out += fmt::format("profile: {:.0f}% of the time in your own code\n", 100.0 * e.coverage);
    std::vector<ProfiledKernel> top = e.profile;
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.device_us > b.device_us; });
    for (size_t i = 0; i < top.size() && i < 5; ++i)
      out += fmt::format("  {:<24} {:>9.1f} us  {:>4} calls  {}\n", top[i].name, top[i].device_us, top[i].calls,
                         top[i].candidate ? "yours" : "library");
  }
  if (e.hacked()) out += fmt::format("hacking checks: {}{}\n", hacking_flag_names(e.hacking_flags),
                                     e.hacking_reason.empty() ? "" : " (" + e.hacking_reason + ")");
  out += fmt::format("reward: {:.3f}", reward.reward);
  if (reward.outcome == RewardOutcome::correct)
    out += fmt::format(" (correct {:.3f} + speedup {:.3f} + coverage {:.3f})", reward.correctness, reward.speedup,
                       reward.coverage);
  // The compiler quotes the policy's source, which may hold U+FFFD or any bytes, and trim_middle
  // cuts bytes, not characters: the feedback goes to a tokenizer, which takes valid UTF-8 only.
  return detail::utf8_lossy(out + "\n");
}

namespace {

const char* speed_bucket(double s) { return s < 1.0 ? "<1" : s < 1.5 ? "1-1.5" : s < 2.0 ? "1.5-2" : ">=2"; }
const char* own_bucket(double c) { return c < 0.3 ? "<0.3" : c < 0.7 ? "0.3-0.7" : ">=0.7"; }

}  // namespace

std::string compact_observation(const std::string& task_id, int turn, const TurnRecord* last) {
  std::string out = fmt::format("task={} turn={}", task_id, turn);
  if (!last) return out + " last=none";
  out += fmt::format(" last={}", to_string(last->reward.outcome));
  if (last->reward.outcome == RewardOutcome::correct)
    out += fmt::format(" speed={} own={}", speed_bucket(last->eval.speedup), own_bucket(last->eval.coverage));
  return out;
}

std::vector<std::string> compact_vocabulary(const TaskSet& tasks, int max_turns) {
  std::vector<std::string> words;
  for (const Task& t : tasks.tasks) words.push_back("task=" + t.id);
  for (int k = 0; k < max_turns; ++k) words.push_back(fmt::format("turn={}", k));
  words.push_back("last=none");
  for (RewardOutcome o : {RewardOutcome::correct, RewardOutcome::format, RewardOutcome::compile, RewardOutcome::runtime,
                          RewardOutcome::incorrect, RewardOutcome::hacking})
    words.push_back(std::string("last=") + to_string(o));
  for (const char* b : {"<1", "1-1.5", "1.5-2", ">=2"}) words.push_back(std::string("speed=") + b);
  for (const char* b : {"<0.3", "0.3-0.7", ">=0.7"}) words.push_back(std::string("own=") + b);
  return words;
}

KernelEnv::KernelEnv(std::shared_ptr<KernelEvaluator> evaluator, KernelRewardPolicy reward, KernelEnvOptions options)
    : evaluator_(std::move(evaluator)), reward_(std::move(reward)), options_(std::move(options)) {
  if (!evaluator_) fail("KernelEnv: the evaluator is null");
  if (options_.max_turns < 1) fail("env.max_turns: {} is out of range; allowed: >= 1", options_.max_turns);
}

std::string KernelEnv::task_prompt(const Task& task) const {
  std::string p = fmt::format("Task (level {}): {}\n", task.level, task.description);
  if (!task.reference.empty()) p += fmt::format("\nReference:\n{}\n", task.reference);
  if (options_.action == ActionFormat::plan)
    return p + "\nAnswer with a kernel plan, one choice per slot:\n" + plan_grammar_text() + "\n";
  if (task.backend == "cpu")
    p += "\nWrite a C++ kernel that computes the same outputs as fast as possible. Include "
         "<turnrl/kernels/candidate_api.h> and define\n"
         "  extern \"C\" int turnrl_kernel(const turnrl_tensor* inputs, int num_inputs,\n"
         "                                turnrl_tensor* outputs, int num_outputs, const turnrl_lib* lib);\n"
         "Every output element must be written; return 0 on success.\n";
  return p + fmt::format("\nReturn the complete source as a single ```{}``` block. Let's think step by step.\n",
                         task.language);
}

Observation KernelEnv::reset(const Task& task) {
  task_ = task;
  history_.clear();
  done_ = false;
  observation_ = Observation{{{"system", options_.system_prompt}, {"user", task_prompt(task)}}, 0,
                             compact_observation(task.id, 0, nullptr)};
  return observation_;
}

std::optional<EvalRequest> KernelEnv::prepare(const Action& action, TurnRecord& record) const {
  if (done_) fail("KernelEnv::step: the episode is over (turn {} of {}); call reset() first",
                  int(history_.size()), options_.max_turns);
  record.action = action.text;
  std::string error;
  if (options_.action == ActionFormat::plan) {
    const PlanExpansion expansion = expand_plan(task_, action.text);
    record.candidate = expansion.source;
    error = expansion.error;
  } else {
    const Extraction x = extract_candidate(action.text, {task_.language});
    record.candidate = x.code;
    error = x.error;
  }
  if (!error.empty()) {
    record.eval.stage = EvalStage::none;
    record.eval.error = EvalError::format;
    record.eval.message = error;
    return std::nullopt;
  }
  EvalRequest req;
  req.task = task_.id;
  req.candidate = record.candidate;
  req.correctness_trials = options_.correctness_trials;
  req.timing_trials = options_.timing_trials;
  req.seed = options_.seed;
  return req;
}

StepResult KernelEnv::finish(TurnRecord record) {
  record.reward = reward_.score(record.eval);
  record.feedback = render_feedback(record.eval, record.reward, options_.feedback_chars);
  const EvalResult& e = record.eval;
  StepResult out;
  out.reward = record.reward.reward;
  out.feedback = record.feedback;
  out.payload = std::make_shared<KernelVerdict>(e, record.reward);
  out.info = {{"correct", e.correct ? 1.0 : 0.0},
              {"speedup", e.speedup},
              {"coverage", e.coverage},
              {"hacked", e.hacked() ? 1.0 : 0.0},
              {"format_error", e.error == EvalError::format ? 1.0 : 0.0},
              {"compiled", e.stage >= EvalStage::compiled ? 1.0 : 0.0},
              {"eval_seconds", e.wall_seconds}};
  history_.push_back(std::move(record));
  const bool target_met = options_.target_speedup && e.correct && !e.hacked() && e.speedup >= *options_.target_speedup;
  done_ = target_met || int(history_.size()) >= options_.max_turns;
  observation_.messages.push_back({"assistant", history_.back().action});
  if (!done_) {
    observation_.messages.push_back(
        {"user", fmt::format("Now you have received the server feedback for your last implementation. Based on that "
                             "and all your previous responses, improve the implementation.\n\nHere is the server "
                             "feedback. Please refer to this feedback to improve the implementation:\nServer feedback "
                             "(status/metrics/errors):\n{}\nReturn an improved {} as a single ```{}``` block. Let's "
                             "think step by step.\n",
                             history_.back().feedback,
                             options_.action == ActionFormat::plan ? "kernel plan" : "implementation",
                             options_.action == ActionFormat::plan ? "plan" : task_.language)});
  }
  observation_.turn = int(history_.size());
  observation_.compact = compact_observation(task_.id, observation_.turn, &history_.back());
  out.observation = observation_;
  out.done = done_;
  out.info["target_met"] = target_met ? 1.0 : 0.0;
  return out;
}

StepResult KernelEnv::step(const Action& action) { return step_together({this}, {action}).front(); }

std::vector<StepResult> KernelEnv::step_together(const std::vector<KernelEnv*>& envs, const std::vector<Action>& actions) {
  // One evaluate() call per distinct evaluator (normally one, shared by every episode).
  std::vector<TurnRecord> records(envs.size());
  std::map<KernelEvaluator*, std::vector<size_t>> by_evaluator;
  std::vector<EvalRequest> requests(envs.size());
  for (size_t i = 0; i < envs.size(); ++i)
    if (auto req = envs[i]->prepare(actions[i], records[i])) {
      requests[i] = std::move(*req);
      by_evaluator[envs[i]->evaluator_.get()].push_back(i);
    }
  for (auto& [evaluator, indices] : by_evaluator) {
    std::vector<EvalRequest> batch;
    for (size_t i : indices) batch.push_back(requests[i]);
    std::vector<EvalResult> results = evaluator->evaluate(batch);
    if (results.size() != batch.size())
      fail("KernelEnv: the evaluator returned {} results for {} requests", results.size(), batch.size());
    for (size_t k = 0; k < indices.size(); ++k) records[indices[k]].eval = std::move(results[k]);
  }
  std::vector<StepResult> out;
  for (size_t i = 0; i < envs.size(); ++i) out.push_back(envs[i]->finish(std::move(records[i])));
  return out;
}

std::string KernelVerdict::serialize() const { return encode_result(eval); }

std::string KernelVerdict::json_fields() const {
  return fmt::format("\"outcome\": {}, \"speedup\": {}, \"coverage\": {}, \"hacking\": {}, \"message\": {}",
                     json_string(to_string(reward.outcome)), eval.speedup, eval.coverage,
                     json_string(hacking_flag_names(eval.hacking_flags)), json_string(eval.message.substr(0, 300)));
}

PayloadDecoder kernel_verdict_decoder(KernelRewardPolicy reward) {
  return [reward](const std::string& bytes) -> std::shared_ptr<const StepPayload> {
    EvalResult eval = decode_result(bytes);
    const KernelReward score = reward.score(eval);
    return std::make_shared<KernelVerdict>(std::move(eval), score);
  };
}

const KernelVerdict& kernel_verdict(const StepPayload* payload) {
  const auto* verdict = dynamic_cast<const KernelVerdict*>(payload);
  if (!verdict) fail("kernel_verdict: the turn's payload is {}; kernel stages need the KernelVerdict of a KernelEnv",
                     payload ? "another domain's" : "missing");
  return *verdict;
}

std::vector<std::unique_ptr<Environment>> KernelEnvPool::as_environments(std::vector<std::unique_ptr<KernelEnv>> envs) {
  std::vector<std::unique_ptr<Environment>> out;
  for (auto& e : envs) out.push_back(std::move(e));
  return out;
}

KernelEnvPool::KernelEnvPool(std::vector<std::unique_ptr<KernelEnv>> environments)
    : EnvironmentPool(as_environments(std::move(environments))) {}

std::vector<StepResult> KernelEnvPool::step(const std::vector<size_t>& episodes, const std::vector<Action>& actions) {
  check_step(episodes, actions);
  std::vector<KernelEnv*> envs;
  // Every environment is a KernelEnv: the constructor takes nothing else.
  for (size_t e : episodes) envs.push_back(&static_cast<KernelEnv&>(at(e)));
  return KernelEnv::step_together(envs, actions);
}

EnvironmentPoolFactory kernel_env_pools(std::shared_ptr<KernelEvaluator> evaluator, KernelRewardPolicy reward,
                                        KernelEnvOptions options) {
  if (!evaluator) fail("kernel_env_pools: the evaluator is null");
  return [evaluator, reward, options](size_t episodes) -> std::unique_ptr<EnvironmentPool> {
    std::vector<std::unique_ptr<KernelEnv>> envs;
    for (size_t i = 0; i < episodes; ++i) envs.push_back(std::make_unique<KernelEnv>(evaluator, reward, options));
    return std::make_unique<KernelEnvPool>(std::move(envs));
  };
}

}  // namespace turnrl
