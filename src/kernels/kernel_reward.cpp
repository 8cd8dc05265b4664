#include "turnrl/kernels/kernel_reward.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"

namespace turnrl {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The option field holding `outcome`'s penalty (const or not, as `o` is).
template <typename Options>
auto& penalty_slot(Options& o, RewardOutcome outcome) {
  switch (outcome) {
    case RewardOutcome::format: return o.format_penalty;
    case RewardOutcome::compile: return o.compile_penalty;
    case RewardOutcome::runtime: return o.runtime_penalty;
    case RewardOutcome::incorrect: return o.incorrect_penalty;
    case RewardOutcome::hacking: return o.hacking_penalty;
    case RewardOutcome::correct: break;
  }
  fail("reward.penalties: a correct turn has no penalty");
}

// The reference's penalty table per function (reward_client.py, research §5.2-5.3).
double reference_penalty(RewardFunction function, RewardOutcome outcome) {
  if (function != RewardFunction::like_kernel) return 0.0;
  switch (outcome) {
    case RewardOutcome::compile: return -0.5;
    case RewardOutcome::incorrect: return -0.3;
    case RewardOutcome::correct: return 0.0;
    default: return -1.0;
  }
}

void check_range(const char* field, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) fail("reward.{}: {} is out of range; allowed: [{}, {}]", field, v, lo, hi);
}

double speedup_term(const KernelRewardOptions& o, double s) {
  if (!std::isfinite(s) || s <= 0) return 0.0;  // no valid timing: the reference's None -> 0
  const double clipped = std::min(s, o.speedup_upper_bound);
  if (clipped < o.speedup_lower_bound) return 0.0;
  if (o.speedup_form == SpeedupForm::linear) return o.speedup_weight * clipped;
  return o.speedup_weight * std::log(std::max(clipped, 1.0 / o.speedup_upper_bound));
}

std::string failure_reason(RewardOutcome outcome, const EvalResult& r) {
  if (outcome == RewardOutcome::hacking) {
    std::string names = hacking_flag_names(r.hacking_flags);
    if (names.empty()) names = r.hacking_reason.empty() ? "unspecified" : r.hacking_reason;
    return "hacking: " + names;
  }
  if (r.error != EvalError::none) return fmt::format("{}: {}", to_string(outcome), to_string(r.error));
  return fmt::format("{}: stopped at stage {}", to_string(outcome), to_string(r.stage));
}

}  // namespace

KernelRewardOptions& KernelRewardOptions::with_penalty(RewardOutcome outcome, double v) {
  penalty_slot(*this, outcome) = v;
  return *this;
}

double KernelRewardOptions::penalty(RewardOutcome outcome) const {
  if (outcome == RewardOutcome::correct) return 0.0;
  const std::optional<double>& slot = penalty_slot(*this, outcome);
  return slot ? *slot : reference_penalty(function, outcome);
}

void KernelRewardOptions::validate() const {
  check_range("correct_weight", correct_weight, 0, 100);
  check_range("speedup_weight", speedup_weight, 0, 100);
  check_range("speedup_upper_bound", speedup_upper_bound, 1, 1e6);
  check_range("speedup_lower_bound", speedup_lower_bound, 0, speedup_upper_bound);
  check_range("speedup_epsilon", speedup_epsilon, 0, 10);
  check_range("coverage.weight", coverage_weight, 0, 100);
  check_range("coverage.threshold", coverage_threshold, 0, 1);
  for (RewardOutcome outcome : {RewardOutcome::format, RewardOutcome::compile, RewardOutcome::runtime,
                                RewardOutcome::incorrect, RewardOutcome::hacking})
    check_range(fmt::format("penalties.{}", to_string(outcome)).c_str(), penalty(outcome), -100, 100);
  for (size_t i = 0; i < tiers.size(); ++i) {
    check_range(fmt::format("tiers.min_speedup[{}]", i).c_str(), tiers[i].min_speedup, 0, 1e6);
    check_range(fmt::format("tiers.reward[{}]", i).c_str(), tiers[i].reward, -100, 100);
    if (i > 0 && !(tiers[i].min_speedup < tiers[i - 1].min_speedup))
      fail("reward.tiers.min_speedup[{}]: {} must be below the previous tier's {}; tiers are sorted descending", i,
           tiers[i].min_speedup, tiers[i - 1].min_speedup);
  }
  check_range("tiers.below", below_tiers_reward, -100, 100);
}

template <typename V>
static void describe(V& v, KernelRewardOptions& o) {
  v.choice("function", o.function, {"speedup", "weighted", "like_kernel"}, parse_reward_function,
           "speedup | weighted | like_kernel");
  v.number("correct_weight", o.correct_weight, 0, 100, "w_c; [0, 100]");
  v.number("speedup_weight", o.speedup_weight, 0, 100, "w_p; [0, 100]");
  v.choice("speedup_form", o.speedup_form, {"linear", "log"}, parse_speedup_form, "linear | log");
  v.number("speedup_upper_bound", o.speedup_upper_bound, 1, 1e6, "speedup clipped to this; >= 1");
  v.number("speedup_lower_bound", o.speedup_lower_bound, 0, 1e6, "speedups below score 0; >= 0");
  v.number("speedup_epsilon", o.speedup_epsilon, 0, 10, "weighted: bonus needs s >= 1 + eps");
  v.section("coverage", "profiling-based reward (PR)", [&](auto& c) {
    c.flag("enabled", o.coverage_enabled, "add coverage_weight * coverage for correct turns");
    c.number("weight", o.coverage_weight, 0, 100, "[0, 100]");
    c.number("threshold", o.coverage_threshold, 0, 1, "coverage below this adds nothing; [0, 1]");
    c.choice("source", o.coverage_source, {"true_share", "reference", "kernel_count"}, parse_coverage_source,
             "true_share | reference | kernel_count");
  });
  v.section("penalties",
            "failed turns' rewards by outcome (format compile runtime incorrect hacking), [-100, 100]; unset = "
            "the function's default",
            [&](auto& p) {
              p.optional_number("format", o.format_penalty, -100, 100, "[-100, 100]");
              p.optional_number("compile", o.compile_penalty, -100, 100, "[-100, 100]");
              p.optional_number("runtime", o.runtime_penalty, -100, 100, "[-100, 100]");
              p.optional_number("incorrect", o.incorrect_penalty, -100, 100, "[-100, 100]");
              p.optional_number("hacking", o.hacking_penalty, -100, 100, "[-100, 100]");
            });
  std::vector<double> mins, rewards;
  for (const SpeedupTier& t : o.tiers) mins.push_back(t.min_speedup), rewards.push_back(t.reward);
  v.section("tiers", "like_kernel: stepped rewards by speedup", [&](auto& t) {
    t.numbers("min_speedup", mins, "tier thresholds, descending");
    t.numbers("reward", rewards, "reward of each tier");
    t.number("below", o.below_tiers_reward, -100, 100, "correct but below every tier");
  });
  if constexpr (V::reads) {
    if (mins.size() != rewards.size())
      fail("reward.tiers.reward: {} tiers but {} rewards; the two lists pair up", mins.size(), rewards.size());
    o.tiers.clear();
    for (size_t i = 0; i < mins.size(); ++i) o.tiers.push_back({mins[i], rewards[i]});
  }
}

void read_options(ConfigReader& r, KernelRewardOptions& o) {
  read_described(r, o);
  o.validate();
}

void write_options(ConfigWriter& w, const KernelRewardOptions& o) { write_described(w, o); }

RewardOutcome classify(const EvalResult& r) {
  if (r.hacked() || r.error == EvalError::hacking) return RewardOutcome::hacking;
  switch (r.error) {
    case EvalError::format: return RewardOutcome::format;
    case EvalError::compile:
    case EvalError::load: return RewardOutcome::compile;
    case EvalError::runtime:
    case EvalError::crash:
    case EvalError::timeout:
    case EvalError::memory:
    case EvalError::output_limit:
    case EvalError::internal: return RewardOutcome::runtime;
    case EvalError::shape:
    case EvalError::mismatch:
    case EvalError::nonfinite: return RewardOutcome::incorrect;
    case EvalError::hacking:
    case EvalError::none: break;
  }
  if (r.correct) return RewardOutcome::correct;
  return r.stage == EvalStage::none ? RewardOutcome::format : RewardOutcome::incorrect;
}

double coverage_of(const EvalResult& r, CoverageSource source) {
  double c = 0;
  switch (source) {
    case CoverageSource::true_share: c = r.coverage; break;
    case CoverageSource::reference: c = r.reference_coverage; break;
    case CoverageSource::kernel_count: c = r.kernel_count_coverage; break;
  }
  return std::isfinite(c) ? std::clamp(c, 0.0, 1.0) : 0.0;
}

KernelRewardPolicy::KernelRewardPolicy(KernelRewardOptions options) : options_(std::move(options)) {
  options_.validate();
}

KernelReward KernelRewardPolicy::score(const EvalResult& r) const {
  const KernelRewardOptions& o = options_;
  KernelReward out;
  out.outcome = classify(r);
  if (out.outcome != RewardOutcome::correct) {
    out.penalty = out.reward = o.penalty(out.outcome);
    out.reason = failure_reason(out.outcome, r);
    return out;
  }
  const double s = std::isfinite(r.speedup) ? r.speedup : 0.0;
  switch (o.function) {
    case RewardFunction::speedup:
      out.correctness = o.correct_weight;
      out.speedup = speedup_term(o, s);
      break;
    case RewardFunction::weighted:
      out.correctness = o.correct_weight;
      out.speedup = s >= 1.0 + o.speedup_epsilon ? o.speedup_weight : 0.0;
      break;
    case RewardFunction::like_kernel: {
      auto tier = std::find_if(o.tiers.begin(), o.tiers.end(), [&](const SpeedupTier& t) { return s >= t.min_speedup; });
      out.correctness = tier == o.tiers.end() ? o.below_tiers_reward : tier->reward;
      break;
    }
  }
  if (o.coverage_enabled) {
    const double c = coverage_of(r, o.coverage_source);
    if (c >= o.coverage_threshold) out.coverage = o.coverage_weight * c;
  }
  out.reward = out.correctness + out.speedup + out.coverage;
  return out;
}

std::vector<KernelReward> KernelRewardPolicy::score(const std::vector<EvalResult>& results) const {
  std::vector<KernelReward> out;
  out.reserve(results.size());
  for (const EvalResult& r : results) out.push_back(score(r));
  return out;
}

std::vector<double> KernelRewardPolicy::rewards(const std::vector<EvalResult>& results) const {
  std::vector<double> out;
  out.reserve(results.size());
  for (const EvalResult& r : results) out.push_back(score(r).reward);
  return out;
}

const char* to_string(RewardFunction v) {
  switch (v) {
    case RewardFunction::speedup: return "speedup";
    case RewardFunction::weighted: return "weighted";
    case RewardFunction::like_kernel: return "like_kernel";
  }
  return "?";
}

const char* to_string(SpeedupForm v) { return v == SpeedupForm::linear ? "linear" : "log"; }

const char* to_string(RewardOutcome v) {
  switch (v) {
    case RewardOutcome::correct: return "correct";
    case RewardOutcome::format: return "format";
    case RewardOutcome::compile: return "compile";
    case RewardOutcome::runtime: return "runtime";
    case RewardOutcome::incorrect: return "incorrect";
    case RewardOutcome::hacking: return "hacking";
  }
  return "?";
}

RewardFunction parse_reward_function(const std::string& name, const std::string& field) {
  for (RewardFunction v : {RewardFunction::speedup, RewardFunction::weighted, RewardFunction::like_kernel})
    if (name == to_string(v)) return v;
  fail("{}: unknown value '{}'; allowed: speedup, weighted, like_kernel", field, name);
}

SpeedupForm parse_speedup_form(const std::string& name, const std::string& field) {
  if (name == "linear") return SpeedupForm::linear;
  if (name == "log") return SpeedupForm::log;
  fail("{}: unknown value '{}'; allowed: linear, log", field, name);
}

}  // namespace turnrl
