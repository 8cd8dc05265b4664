#include "turnrl/rl/progress.h"

#include <unistd.h>

#include <cmath>

#include <fmt/format.h>

namespace turnrl {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
}

std::string format_progress(const ProgressSample& p, double eta_seconds) {
  const double t = p.step_seconds > 0 ? p.step_seconds : 1e-9;
  return fmt::format("step {}/{} | {:.1f} rollouts/s | {:.1f} evals/s | reward {:.3f} | fast@1.2 {:.2f} | ETA {}",
                     p.step, p.total_steps, double(p.rollouts) / t, double(p.evaluations) / t, p.reward, p.fast,
                     format_duration(eta_seconds));
}

ProgressLine::ProgressLine(int64_t start_step, bool enabled, std::FILE* out)
    : enabled_(enabled), tty_(::isatty(::fileno(out)) != 0), out_(out), start_step_(start_step),
      start_(std::chrono::steady_clock::now()) {}

void ProgressLine::update(const ProgressSample& p) {
  if (enabled_) print(format_progress(p, eta_seconds(p.step, p.total_steps)));
}

double ProgressLine::eta_seconds(int64_t step, int64_t total_steps) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step - start_step_;
  return done > 0 ? elapsed / double(done) * double(total_steps - step) : NAN;
}

void ProgressLine::print(const std::string& line) {
  if (!enabled_) return;
  if (tty_) {
    fmt::print(out_, "\r{:<110}", line);
    dirty_ = true;
  } else {
    fmt::print(out_, "{}\n", line);
  }
  std::fflush(out_);
}

void ProgressLine::finish() {
  if (enabled_ && dirty_) fmt::print(out_, "\n");
  dirty_ = false;
}

}  // namespace turnrl
