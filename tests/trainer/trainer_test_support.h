#pragma once
// Shared by the trainer tests: a deterministic evaluator for plan candidates (so runs are
// reproducible bit for bit and need no compiler) and a tiny training config.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/eval/evaluator.h"
#include "turnrl/trainer/config.h"

namespace turnrl::test {

// Reads the plan back from the expanded source ("// plan: ...") and scores it with fixed rules:
// bf16 accumulation and the shortcuts are wrong, unchecked bounds with a width > 1 are wrong,
// and speed grows with fusion, width and fewer library fallbacks; coverage follows the fallback.
class PlanRuleEvaluator : public KernelEvaluator {
 public:
  std::vector<EvalResult> evaluate(const std::vector<EvalRequest>& requests) override {
    std::vector<EvalResult> out;
    for (const EvalRequest& r : requests) {
      ++evaluations;
      std::map<std::string, std::string> plan;
      const size_t at = r.candidate.find("// plan: ");
      if (at == std::string::npos) {  // not a plan (the trainer's start-up probe): the candidate's fault
        EvalResult e;
        e.error = EvalError::format;
        out.push_back(e);
        continue;
      }
      std::istringstream words(r.candidate.substr(at + 9, r.candidate.find('\n', at) - at - 9));
      for (std::string w; words >> w;) plan[w.substr(0, w.find('='))] = w.substr(w.find('=') + 1);
      const int width = std::stoi(plan["vec"]) * std::stoi(plan["unroll"]);
      EvalResult e;
      e.stage = EvalStage::ran;
      const bool wrong = plan["acc"] == "bf16" || plan["shortcut"] != "none" || (plan["bounds"] == "unchecked" && width > 1);
      if (wrong) {
        e.error = EvalError::mismatch;
        e.failing_index = 7;
        out.push_back(e);
        continue;
      }
      e.stage = EvalStage::profiled;
      e.correct = true;
      const double fallback = plan["fallback"] == "none" ? 1.0 : plan["fallback"] == "partial" ? 0.8 : 0.6;
      e.speedup = (plan["fusion"] == "fused" ? 1.2 : 0.8) * (1.0 + 0.1 * std::log2(double(width))) * fallback *
                  (plan["acc"] == "f64" ? 0.8 : 1.0);
      e.coverage = plan["fallback"] == "none" ? 0.95 : plan["fallback"] == "partial" ? 0.5 : 0.1;
      e.reference_time = {100.0, 99.0, 1.0, 3};
      e.candidate_time = {100.0 / e.speedup, 99.0 / e.speedup, 1.0, 3};
      out.push_back(e);
    }
    return out;
  }
  int64_t evaluations = 0;
};

// A config small enough for unit tests: 2 tasks x 4 episodes x 2 turns, a one-layer model.
inline TrainConfig tiny_config(const std::string& run_dir, int64_t steps = 4) {
  TrainConfig c;
  c.run.dir = run_dir;
  c.run.progress = false;
  c.trainer.steps = steps;
  c.trainer.tasks_per_step = 2;
  c.trainer.samples_per_task = 4;
  c.trainer.micro_batch_size = 5;  // several micro-batches: exercises gradient accumulation
  c.trainer.threads = 1;
  c.trainer.seed = 7;
  c.model.d_model = 32;
  c.model.layers = 1;
  c.model.heads = 2;
  c.env.max_turns = 2;
  c.checkpoint.every = 1;
  c.checkpoint.keep_last = 3;
  c.optimizer.lr = 1e-2;
  c.rejection.groups.min_last_turn_std = 0;  // keep every group: more rows to train on
  return c;
}

// parse_config of YAML text, and the message it fails with ("" when it reads).
inline TrainConfig parse_config_text(const std::string& yaml) { return parse_config(parse_yaml(yaml, "test")); }
inline std::string config_error(const std::string& yaml) {
  try {
    parse_config_text(yaml);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("turnrl-trainer-test-" + name + "-" + std::to_string(::getpid()));
  turnrl::remove_tree(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace turnrl::test
