#pragma once
// The live progress line on stderr: step, rollouts/s, evaluations/s, reward and ETA. On a
// terminal it rewrites one line (\r); otherwise it prints one line per step.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace turnrl {

struct ProgressSample {
  int64_t step = 0;         // steps completed
  int64_t total_steps = 0;
  int64_t rollouts = 0;     // episodes of this step
  int64_t evaluations = 0;  // evaluator requests of this step
  double step_seconds = 0;
  double reward = 0;        // mean turn reward of this step
  double fast = 0;          // fast@1.2 of this step
};

// "step 3/40 | 21.4 rollouts/s | 55.0 evals/s | reward 0.512 | fast@1.2 0.25 | ETA 4m12s"
std::string format_progress(const ProgressSample& sample, double eta_seconds);
// "4m12s", "1h03m", "12s".
std::string format_duration(double seconds);

class ProgressLine {
 public:
  // start_step: steps already done (a resumed run), so the ETA counts only this session's pace.
  explicit ProgressLine(int64_t start_step, bool enabled = true, std::FILE* out = stderr);
  // The RL trainer's line (format_progress).
  void update(const ProgressSample& sample);
  // Any loop's own line (e.g. `turnrl sft`'s tokens/s and loss), shown the same way.
  void print(const std::string& line);
  // Seconds left until `total_steps` at this session's pace so far (NaN before its first step).
  double eta_seconds(int64_t step, int64_t total_steps) const;
  void finish();

 private:
  bool enabled_, tty_;
  std::FILE* out_;
  int64_t start_step_;
  std::chrono::steady_clock::time_point start_;
  bool dirty_ = false;
};

}  // namespace turnrl
