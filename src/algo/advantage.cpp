#include "turnrl/algo/advantage.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "turnrl/algo/returns.h"
#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"
#include "turnrl/core/masked.h"
#include "turnrl/core/segment.h"

#ifdef TURNRL_WITH_CUDA
#include "fused_cuda.h"
#endif

namespace turnrl {
namespace {

// Rows that take part in baselines and receive an advantage.
torch::Tensor valid_rows(const TurnBatch& batch) { return batch.turn_mask_or_all(); }

void check_returns_shape(const TurnBatch& batch, const torch::Tensor& returns) {
  if (!returns.defined() || returns.dim() != 1 || returns.size(0) != batch.size())
    fail("advantage: returns must be a [N] tensor with N = {} (one per turn); got {}", batch.size(),
         returns.defined() ? fmt::format("{}", fmt::join(returns.sizes(), "x")) : std::string("undefined"));
  if (!at::isFloatingType(returns.scalar_type()))
    fail("advantage: returns dtype {} not allowed; must be a floating type", c10::toString(returns.scalar_type()));
}

// `what` names the per-turn quantity in the error ("return", or "value" for gae's critic values).
void check_returns(const TurnBatch& batch, const torch::Tensor& returns, const torch::Tensor& valid,
                   const AdvantageOptions& options, const char* what = "return") {
  check_returns_shape(batch, returns);
  if (!options.check_finite || batch.size() == 0) return;
  const torch::Tensor bad = ~at::isfinite(returns) & valid;
  if (bad.any().item<bool>()) {
    const int64_t row = bad.nonzero().view(-1)[0].item<int64_t>();
    fail("advantage: the {} of row {} (group {}, trajectory {}, turn {}) is {}; {}s of unmasked turns must be "
         "finite (one NaN would poison its whole group)",
         what, row, batch.group[row].item<int64_t>(), batch.traj[row].item<int64_t>(), batch.turn[row].item<int64_t>(),
         returns[row].item<double>(), what);
  }
}

torch::Tensor singleton_value(const torch::Tensor& values, SingletonAdvantage singleton) {
  return singleton == SingletonAdvantage::raw_return ? values : at::zeros_like(values);
}

// A_i = G_i - mean of the other valid members of i's segment; singletons per options.
torch::Tensor leave_one_out(const torch::Tensor& values, const torch::Tensor& segment, int64_t num_segments,
                            const torch::Tensor& valid, SingletonAdvantage singleton) {
  const SegmentSums s = segment_sums(values, segment, num_segments, valid);
  const torch::Tensor sum = gather_segments(s.sum, segment);
  const torch::Tensor count = gather_segments(s.count, segment);
  const torch::Tensor others_mean = (sum - values) / (count - 1).clamp_min(1);
  return masked_fill_zero(at::where(count > 1, values - others_mean, singleton_value(values, singleton)), valid);
}

// A_i = G_i - mean of the segment (the sample included); singletons per options.
torch::Tensor self_inclusive_centre(const torch::Tensor& values, const torch::Tensor& segment, int64_t num_segments,
                                    const torch::Tensor& valid, SingletonAdvantage singleton) {
  const SegmentSums s = segment_sums(values, segment, num_segments, valid);
  const torch::Tensor count = gather_segments(s.count, segment);
  const torch::Tensor mean = gather_segments(s.sum, segment) / count.clamp_min(1);
  return masked_fill_zero(at::where(count > 1, values - mean, singleton_value(values, singleton)), valid);
}

// GRPO's standardisation: (G - mean) / (std + eps); N = 1 -> mean 0, std 1; std < 1e-6 -> 1.
torch::Tensor standardise(const torch::Tensor& values, const torch::Tensor& segment, int64_t num_segments,
                          const torch::Tensor& valid, const AdvantageOptions& options) {
  const SegmentSums s = segment_sums(values, segment, num_segments, valid);
  const torch::Tensor count = gather_segments(s.count, segment);
  const torch::Tensor mean = at::where(count > 1, gather_segments(s.sum, segment) / count.clamp_min(1),
                                       0);
  const torch::Tensor centred = values - mean;
  const SegmentSums sq = segment_sums(centred.square(), segment, num_segments, valid);
  const torch::Tensor std = (gather_segments(sq.sum, segment) / (count - 1).clamp_min(1)).sqrt();
  const torch::Tensor safe_std = at::where((count > 1) & (std >= 1e-6), std, 1);
  torch::Tensor adv = centred / (safe_std + options.std_epsilon);
  if (options.singleton == SingletonAdvantage::zero) adv = at::where(count > 1, adv, 0);
  return masked_fill_zero(adv, valid);
}

using GroupedRule = torch::Tensor (*)(const torch::Tensor&, const torch::Tensor&, int64_t, const torch::Tensor&,
                                      const AdvantageOptions&);

// Applies a per-segment rule under the requested grouping. Trajectory grouping runs the rule on
// each trajectory's turn-0 row (its return is the trajectory's score) and hands the result to
// every valid turn of that trajectory.
torch::Tensor grouped(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options,
                      Grouping grouping, GroupedRule rule) {
  const torch::Tensor valid = valid_rows(batch);
  check_returns(batch, returns, valid, options);
  if (batch.size() == 0) return at::zeros_like(returns);
  if (grouping == Grouping::turn)
    return rule(returns, group_turn_key(batch), batch.num_groups * batch.max_turns, valid, options);
  const torch::Tensor head = valid & (batch.turn == 0);
  const torch::Tensor head_adv = rule(masked_fill_zero(returns, head), batch.group, batch.num_groups, head, options);
  const torch::Tensor per_traj = at::zeros({batch.num_trajectories}, returns.options()).index_add_(0, batch.traj, head_adv);
  return masked_fill_zero(gather_segments(per_traj, batch.traj), valid);
}

torch::Tensor loo_rule(const torch::Tensor& v, const torch::Tensor& seg, int64_t n, const torch::Tensor& valid,
                       const AdvantageOptions& o) {
  return leave_one_out(v, seg, n, valid, o.singleton);
}
torch::Tensor centre_rule(const torch::Tensor& v, const torch::Tensor& seg, int64_t n, const torch::Tensor& valid,
                          const AdvantageOptions& o) {
  return self_inclusive_centre(v, seg, n, valid, o.singleton);
}

// Batch whitening over valid rows without a host synchronisation: fewer than two valid rows
// leave the values unscaled.
torch::Tensor whiten_valid(const torch::Tensor& values, const torch::Tensor& valid) {
  const torch::Tensor w = valid.to(values.scalar_type());
  const torch::Tensor count = w.sum();
  const torch::Tensor mean = masked_fill_zero(values, valid).sum() / count.clamp_min(1);
  const torch::Tensor var = masked_fill_zero((values - mean).square(), valid).sum() / (count - 1).clamp_min(1);
  return masked_fill_zero(at::where(count >= 2, (values - mean) * at::rsqrt(var + 1e-8), values), valid);
}

}  // namespace

torch::Tensor trloo_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options) {
#ifdef TURNRL_WITH_CUDA
  check_returns_shape(batch, returns);
  if (auto fused = fused::trloo_cuda(batch, returns, options)) {
    if (!fused->all_finite) check_returns(batch, returns, valid_rows(batch), options);  // throws, naming the row
    return fused->advantages;
  }
#endif
  return grouped(batch, returns, options, Grouping::turn, loo_rule);
}

torch::Tensor rloo_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options) {
  return grouped(batch, returns, options, Grouping::trajectory, loo_rule);
}

torch::Tensor grpo_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options) {
  return grouped(batch, returns, options, options.grouping, standardise);
}

torch::Tensor dr_grpo_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options) {
  return grouped(batch, returns, options, options.grouping, centre_rule);
}

torch::Tensor reinforce_pp_advantage(const TurnBatch& batch, const torch::Tensor& returns,
                                     const AdvantageOptions& options) {
  const torch::Tensor valid = valid_rows(batch);
  check_returns(batch, returns, valid, options);
  return whiten_valid(returns, valid);
}

torch::Tensor reinforce_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options) {
  const torch::Tensor valid = valid_rows(batch);
  check_returns(batch, returns, valid, options);
  return masked_fill_zero(returns, valid);
}

torch::Tensor gae_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options) {
  if (!batch.values.defined()) fail("advantage 'gae': TurnBatch.values (critic value per turn, float [N]) is required");
  if (!(options.gamma >= 0 && options.gamma <= 1)) fail("advantage.gamma: {} is out of range; allowed: [0, 1]", options.gamma);
  if (!(options.lambda >= 0 && options.lambda <= 1)) fail("advantage.lambda: {} is out of range; allowed: [0, 1]", options.lambda);
  const torch::Tensor valid = valid_rows(batch);
  const int64_t n = batch.size();
  if (n == 0) return at::zeros({0}, batch.reward.options());
  const torch::Tensor rewards = masked_turn_rewards(batch);
  const torch::Tensor values = batch.values.to(rewards.scalar_type());
  check_returns(batch, values, valid, options, "value");

  // Dense [trajectories, turns]; the value after a trajectory's last turn is 0 (empty slots are 0).
  const torch::Tensor v = to_dense_turns(batch, values);
  const torch::Tensor v_next = at::constant_pad_nd(v, {0, 1}).narrow(1, 1, batch.max_turns);
  const torch::Tensor real = to_dense_turns(batch, at::ones_like(rewards));
  const torch::Tensor delta = (to_dense_turns(batch, rewards) + options.gamma * v_next - v) * real;
  const torch::Tensor adv = from_dense_turns(batch, discounted_reverse_cumsum(delta, options.gamma * options.lambda));
  return options.whiten ? whiten_valid(adv, valid) : masked_fill_zero(adv, valid);
}

// --- registry -------------------------------------------------------------------------------
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, AdvantageEstimator> estimators{
      {"trloo", trloo_advantage},         {"rloo", rloo_advantage},
      {"grpo", grpo_advantage},           {"dr_grpo", dr_grpo_advantage},
      {"reinforce_pp", reinforce_pp_advantage}, {"reinforce", reinforce_advantage},
      {"gae", gae_advantage},
  };
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

const AdvantageEstimator& advantage_estimator(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.estimators.find(name);
  if (it == r.estimators.end()) {
    std::vector<std::string> names;
    for (const auto& kv : r.estimators) names.push_back(kv.first);
    fail("advantage.estimator: unknown name '{}'; allowed: {}", name, fmt::join(names, ", "));
  }
  return it->second;
}

void register_advantage_estimator(const std::string& name, AdvantageEstimator estimator) {
  if (name.empty()) fail("register_advantage_estimator: name must not be empty");
  if (!estimator) fail("register_advantage_estimator: estimator '{}' is empty", name);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.estimators[name] = std::move(estimator);
}

std::vector<std::string> advantage_estimator_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& kv : r.estimators) names.push_back(kv.first);
  return names;
}

template <typename V>
static void describe(V& v, AdvantageOptions& o) {
  v.choice("singleton", o.singleton, {"raw_return", "zero"}, parse_singleton_advantage, "raw_return | zero: a group of one");
  v.choice("grouping", o.grouping, {"turn", "trajectory"}, parse_grouping, "turn | trajectory (grpo, dr_grpo)");
  v.number("std_epsilon", o.std_epsilon, 0.0, 1.0, "grpo");
  v.number("gamma", o.gamma, 0.0, 1.0, "gae");
  v.number("lambda", o.lambda, 0.0, 1.0, "gae");
  v.flag("whiten", o.whiten, "gae");
  v.flag("check_finite", o.check_finite, "reject NaN/inf returns");
}

void read_options(ConfigReader& r, AdvantageOptions& o) { read_described(r, o); }

void write_options(ConfigWriter& w, const AdvantageOptions& o) { write_described(w, o); }

const char* to_string(SingletonAdvantage v) { return v == SingletonAdvantage::raw_return ? "raw_return" : "zero"; }
const char* to_string(Grouping v) { return v == Grouping::turn ? "turn" : "trajectory"; }

SingletonAdvantage parse_singleton_advantage(const std::string& name, const std::string& field) {
  if (name == "raw_return") return SingletonAdvantage::raw_return;
  if (name == "zero") return SingletonAdvantage::zero;
  fail("{}: unknown value '{}'; allowed: raw_return, zero", field, name);
}

Grouping parse_grouping(const std::string& name, const std::string& field) {
  if (name == "turn") return Grouping::turn;
  if (name == "trajectory") return Grouping::trajectory;
  fail("{}: unknown value '{}'; allowed: turn, trajectory", field, name);
}

}  // namespace turnrl
