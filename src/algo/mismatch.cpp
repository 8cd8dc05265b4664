#include "turnrl/algo/mismatch.h"

#include <algorithm>
#include <cmath>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"
#include "turnrl/core/masked.h"

#ifdef TURNRL_WITH_CUDA
#include "mismatch_cuda.h"
#endif

namespace turnrl {
namespace {

std::string shape_of(const torch::Tensor& t) {
  return t.defined() ? fmt::format("{}", fmt::join(t.sizes(), "x")) : std::string("undefined");
}

void check_inputs(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp, const torch::Tensor& mask,
                  const torch::Tensor& traj, int64_t num_trajectories) {
  if (!mask.defined() || mask.dim() != 2) fail("mismatch: response_mask must be [N, L]; got {}", shape_of(mask));
  if (!old_logp.defined() || old_logp.sizes() != mask.sizes())
    fail("mismatch: old_logp must have response_mask's shape {}; got {}", shape_of(mask), shape_of(old_logp));
  if (!rollout_logp.defined() || rollout_logp.sizes() != mask.sizes())
    fail("mismatch: rollout_logp must have response_mask's shape {}; got {}", shape_of(mask), shape_of(rollout_logp));
  for (const torch::Tensor* t : {&old_logp, &rollout_logp})
    if (!at::isFloatingType(t->scalar_type()))
      fail("mismatch: log-probs of dtype {} not allowed; must be a floating type", c10::toString(t->scalar_type()));
  if (traj.defined()) {
    if (traj.dim() != 1 || traj.size(0) != mask.size(0) || traj.scalar_type() != at::kLong)
      fail("mismatch: traj must be int64 [N] with N = {}; got {} {}", mask.size(0), c10::toString(traj.scalar_type()),
           shape_of(traj));
    if (num_trajectories < 0) fail("mismatch: num_trajectories {} must be >= 0", num_trajectories);
  }
}

void check_options(const MismatchOptions& o) {
  if (!(o.is_cap > 0)) fail("mismatch.is_cap: {} is out of range; allowed: > 0", o.is_cap);
  if (o.rs_level != MismatchLevel::off && !(o.rs_lower >= 0 && o.rs_lower <= o.rs_upper))
    fail("mismatch.rs_lower/rs_upper: [{}, {}] is not a range; allowed: 0 <= rs_lower <= rs_upper", o.rs_lower,
         o.rs_upper);
  if (o.rs_k3_level != MismatchLevel::off && !(o.rs_k3_upper > 0))
    fail("mismatch.rs_k3_upper: {} is out of range; allowed: > 0", o.rs_k3_upper);
  if (!(o.veto_threshold >= 0 && o.veto_threshold < 1))
    fail("mismatch.veto_threshold: {} is out of range; allowed: [0, 1) (0 disables)", o.veto_threshold);
}

void check_finite(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp, const torch::Tensor& mask) {
  const torch::Tensor bad = (at::isnan(old_logp) | at::isnan(rollout_logp)) & mask;
  if (!bad.any().item<bool>()) return;
  const torch::Tensor where = bad.nonzero()[0];
  const int64_t row = where[0].item<int64_t>(), col = where[1].item<int64_t>();
  fail("mismatch: row {}, token {} has old_logp {} and rollout_logp {}; log-probs of valid tokens must not be NaN", row,
       col, old_logp[row][col].item<double>(), rollout_logp[row][col].item<double>());
}

at::ScalarType compute_type(const torch::Tensor& t) { return at::promote_types(t.scalar_type(), at::kFloat); }

torch::Tensor safe_exp(const torch::Tensor& log) { return log.clamp(-kMismatchSafetyBound, kMismatchSafetyBound).exp(); }

// Row and trajectory sums of a per-token quantity (the log ratio, or k3) and of the mask.
struct Sums {
  torch::Tensor row_sum, row_count;    // [N]
  torch::Tensor traj_sum, traj_count;  // [N]: the row's trajectory's totals
};

torch::Tensor per_trajectory(const torch::Tensor& v, const torch::Tensor& traj, int64_t num_traj) {
  return at::zeros({num_traj}, v.options()).index_add_(0, traj, v);
}

Sums level_sums(const torch::Tensor& row_sum, const torch::Tensor& row_count, const torch::Tensor& traj,
                int64_t num_traj) {
  Sums s{row_sum, row_count, row_sum, row_count};
  if (traj.defined()) {
    s.traj_sum = per_trajectory(row_sum, traj, num_traj).index_select(0, traj);
    s.traj_count = per_trajectory(row_count, traj, num_traj).index_select(0, traj);
  }
  return s;
}

bool is_row_level(MismatchLevel level) { return level != MismatchLevel::off && level != MismatchLevel::token; }

// A row level's aggregate of the summed quantity, [N]: Σ over the row (turn), its mean
// (turn_geo), Σ over the trajectory (sequence), its mean (geometric). For the log ratio it is the
// log of the level's ratio.
torch::Tensor row_level_aggregate(const Sums& s, MismatchLevel level) {
  switch (level) {
    case MismatchLevel::turn: return s.row_sum;
    case MismatchLevel::turn_geo: return s.row_sum / s.row_count.clamp_min(1);
    case MismatchLevel::sequence: return s.traj_sum;
    case MismatchLevel::geometric: return s.traj_sum / s.traj_count.clamp_min(1);
    default: break;
  }
  fail("mismatch: level '{}' has no row-level ratio", to_string(level));
}

torch::Tensor level_log(const torch::Tensor& lr, const Sums& s, MismatchLevel level) {
  return level == MismatchLevel::token ? lr : row_level_aggregate(s, level).unsqueeze(1);
}

torch::Tensor fraction(const torch::Tensor& part, const torch::Tensor& whole) {
  return at::where(whole > 0, part / whole.clamp_min(1), at::zeros_like(whole));
}

// Pass 1: per-row statistics of the valid tokens, all double [N].
struct RowStats {
  torch::Tensor lr_sum, count, veto;   // Σ lr, Σ m, any lr < ln(veto threshold) (bool)
  torch::Tensor abs_sum, abs_max;      // Σ |lr|, max |lr|
  torch::Tensor k3_sum, rho2_sum;      // Σ (ρ − lr − 1), Σ ρ²  with ρ = exp(clamp(lr, ±20))
  torch::Tensor old_sum, rollout_sum;  // Σ old_logp, Σ rollout_logp
  torch::Tensor nan;                   // bool [N]: a valid token's log-prob is NaN (CPU loops only)
};

// Pass 2: what rejection and TIS leave, given the per-row decisions.
struct Applied {
  torch::Tensor mask, weights;  // [N, L]
  torch::Tensor kept_count;     // double [N]: valid tokens kept per row
  torch::Tensor w_sum, w2_sum;  // double 0-dim: Σ w, Σ w² over the input mask (for the ESS)
};

// Per-row decisions shared by both implementations of pass 2.
struct RowPlan {
  torch::Tensor keep_row;  // bool [N]: passes row-level rejection (ratio and k3) and the veto
  torch::Tensor is_log;    // double [N]: log of the row-level IS ratio (undefined for token level)
};

double veto_log(const MismatchOptions& o) { return o.veto_threshold > 0 ? std::log(o.veto_threshold) : -INFINITY; }

// The token-level k3 test: k3 = ρ − lr − 1 <= upper, in double as the row statistics compute it.
bool token_k3_passes(double lr, double upper) {
  return std::exp(std::min(std::max(lr, -kMismatchSafetyBound), kMismatchSafetyBound)) - lr - 1 <= upper;
}

RowStats row_stats_tensor_ops(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp, const torch::Tensor& mask,
                              const MismatchOptions& o) {
  const torch::Tensor lr = mismatch_log_ratio(old_logp, rollout_logp, mask);
  const auto row = [](const torch::Tensor& t) { return t.sum(1).to(at::kDouble); };
  RowStats s;
  s.lr_sum = row(lr);
  s.count = row(mask);
  s.veto = ((lr < veto_log(o)) & mask).any(1);
  const torch::Tensor abs_lr = lr.abs();
  s.abs_sum = row(abs_lr);
  s.abs_max = lr.size(1) > 0 ? abs_lr.amax(1).to(at::kDouble) : at::zeros_like(s.count);
  const torch::Tensor rho = safe_exp(lr);
  s.k3_sum = row(masked_fill_zero(rho - lr - 1, mask));
  s.rho2_sum = row(masked_fill_zero(rho.square(), mask));
  s.old_sum = row(masked_fill_zero(old_logp.to(at::kDouble), mask));
  s.rollout_sum = row(masked_fill_zero(rollout_logp.to(at::kDouble), mask));
  return s;
}

Applied apply_tensor_ops(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp, const torch::Tensor& mask,
                         const RowPlan& plan, const MismatchOptions& o) {
  const torch::Tensor lr = mismatch_log_ratio(old_logp, rollout_logp, mask);
  const torch::Tensor rho = safe_exp(lr);
  torch::Tensor keep = mask & plan.keep_row.unsqueeze(1);
  if (o.rs_level == MismatchLevel::token) keep = keep & (rho >= o.rs_lower) & (rho <= o.rs_upper);
  if (o.rs_k3_level == MismatchLevel::token) {
    const torch::Tensor lr_d = lr.to(at::kDouble);
    keep = keep & (safe_exp(lr_d) - lr_d - 1 <= o.rs_k3_upper);
  }
  const torch::Tensor is_ratio = plan.is_log.defined()
                                     ? safe_exp(plan.is_log).clamp_max(o.is_cap).to(lr.scalar_type()).unsqueeze(1).expand_as(lr)
                                     : rho.clamp_max(o.is_cap);
  Applied a;
  a.mask = keep;
  a.weights = o.is_level == MismatchLevel::off ? keep.to(lr.scalar_type()) : masked_fill_zero(is_ratio, keep);
  a.kept_count = keep.sum(1).to(at::kDouble);
  const torch::Tensor w = masked_fill_zero(is_ratio, mask).to(at::kDouble);
  a.w_sum = w.sum();
  a.w2_sum = w.square().sum();
  return a;
}

// --- CPU: the same two passes as loops over rows, in parallel, without [N, L] temporaries -----

template <typename T>
struct CpuView {
  const T* old;
  const T* rollout;
  const bool* mask;
  int64_t len;
  // The per-token log ratio exactly as mismatch_log_ratio computes it.
  T log_ratio(int64_t i) const {
    T d = old[i] - rollout[i];
    if (std::isnan(d)) d = T(0);
    return std::min(std::max(d, T(-kMismatchLogRatioLimit)), T(kMismatchLogRatioLimit));
  }
};

template <typename T>
CpuView<T> cpu_view(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp, const torch::Tensor& mask) {
  return {old_logp.data_ptr<T>(), rollout_logp.data_ptr<T>(), mask.data_ptr<bool>(), mask.size(1)};
}

int64_t row_grain(int64_t len) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)); }

template <typename T>
RowStats row_stats_cpu(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp, const torch::Tensor& mask,
                       const MismatchOptions& o) {
  const int64_t n = mask.size(0);
  const CpuView<T> v = cpu_view<T>(old_logp, rollout_logp, mask);
  enum { kSum, kCount, kVeto, kAbs, kAbsMax, kK3, kRho2, kOld, kRollout, kNan, kFields };
  torch::Tensor out = at::zeros({kFields, n}, mask.options().dtype(at::kDouble));
  double* p = out.data_ptr<double>();
  const double veto = veto_log(o), bound = kMismatchSafetyBound;
  at::parallel_for(0, n, row_grain(v.len), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      double s[kFields] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t i = r * v.len; i < (r + 1) * v.len; ++i) {
        if (!v.mask[i]) continue;
        s[kNan] = (std::isnan(v.old[i]) || std::isnan(v.rollout[i])) ? 1 : s[kNan];
        const double lr = double(v.log_ratio(i));
        const double rho = std::exp(std::min(std::max(lr, -bound), bound));
        s[kSum] += lr;
        s[kCount] += 1;
        s[kVeto] = (lr < veto) ? 1 : s[kVeto];
        s[kAbs] += std::abs(lr);
        s[kAbsMax] = std::max(s[kAbsMax], std::abs(lr));
        s[kK3] += rho - lr - 1;
        s[kRho2] += rho * rho;
        s[kOld] += double(v.old[i]);
        s[kRollout] += double(v.rollout[i]);
      }
      for (int f = 0; f < kFields; ++f) p[f * n + r] = s[f];
    }
  });
  return {out[kSum],  out[kCount], out[kVeto] > 0, out[kAbs],     out[kAbsMax],
          out[kK3],   out[kRho2],  out[kOld],      out[kRollout], out[kNan] > 0};
}

template <typename T>
Applied apply_cpu(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp, const torch::Tensor& mask,
                  const RowPlan& plan, const MismatchOptions& o) {
  const int64_t n = mask.size(0);
  const CpuView<T> v = cpu_view<T>(old_logp, rollout_logp, mask);
  Applied a;
  a.mask = at::empty_like(mask);
  a.weights = at::empty(mask.sizes(), old_logp.options());
  const torch::Tensor keep_row = plan.keep_row.contiguous();
  const torch::Tensor is_log = plan.is_log.defined() ? plan.is_log.contiguous() : torch::Tensor();
  torch::Tensor acc = at::zeros({3, n}, mask.options().dtype(at::kDouble));
  bool* out_mask = a.mask.data_ptr<bool>();
  T* out_w = a.weights.template data_ptr<T>();
  const bool* keep_p = keep_row.data_ptr<bool>();
  const double* is_log_p = is_log.defined() ? is_log.data_ptr<double>() : nullptr;
  double* acc_p = acc.data_ptr<double>();
  const bool token_rs = o.rs_level == MismatchLevel::token, token_k3 = o.rs_k3_level == MismatchLevel::token;
  const bool is_on = o.is_level != MismatchLevel::off;
  const double bound = kMismatchSafetyBound, cap = o.is_cap, lo = o.rs_lower, hi = o.rs_upper;
  at::parallel_for(0, n, row_grain(v.len), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      double kept = 0, w_sum = 0, w2_sum = 0;
      const T row_w = is_log_p ? T(std::exp(std::min(std::max(is_log_p[r], -bound), bound))) : T(0);
      for (int64_t i = r * v.len; i < (r + 1) * v.len; ++i) {
        if (!v.mask[i]) {
          out_mask[i] = false;
          out_w[i] = T(0);
          continue;
        }
        const T lr = v.log_ratio(i);
        const T rho = std::exp(std::min(std::max(lr, T(-bound)), T(bound)));
        const bool keep = keep_p[r] && (!token_rs || (rho >= lo && rho <= hi)) &&
                          (!token_k3 || token_k3_passes(double(lr), o.rs_k3_upper));
        const T w = std::min(is_log_p ? row_w : rho, T(cap));
        out_mask[i] = keep;
        out_w[i] = keep ? (is_on ? w : T(1)) : T(0);
        kept += keep;
        w_sum += double(w);
        w2_sum += double(w) * double(w);
      }
      acc_p[r] = kept, acc_p[n + r] = w_sum, acc_p[2 * n + r] = w2_sum;
    }
  });
  a.kept_count = acc[0];
  a.w_sum = acc[1].sum();
  a.w2_sum = acc[2].sum();
  return a;
}

bool use_cpu_loops(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp, const torch::Tensor& mask,
                   const MismatchOptions& o) {
  return o.fused && mask.device().is_cpu() && old_logp.scalar_type() == rollout_logp.scalar_type() &&
         (old_logp.scalar_type() == at::kFloat || old_logp.scalar_type() == at::kDouble);
}

// Mean over non-empty rows of exp(−mean logp); the log is capped at 80 so the result stays finite.
torch::Tensor perplexity(const torch::Tensor& logp_sum, const torch::Tensor& count, const torch::Tensor& nonempty) {
  const torch::Tensor ppl = (-logp_sum / count.clamp_min(1)).clamp_max(80).exp();
  return masked_fill_zero(ppl, nonempty).sum() / nonempty.sum().to(at::kDouble).clamp_min(1);
}

MismatchDiagnostics diagnose(const RowStats& s, const Applied& a, const torch::Tensor& traj, int64_t num_traj,
                             at::ScalarType type) {
  MismatchDiagnostics d;
  const torch::Tensor tokens = s.count.sum();
  const auto mean = [&](const torch::Tensor& row_sums) { return row_sums.sum() / tokens.clamp_min(1); };
  d.log_ratio_abs_mean = mean(s.abs_sum);
  d.log_ratio_abs_max = s.abs_max.numel() > 0 ? s.abs_max.max() : at::zeros({}, s.abs_max.options());
  d.k3_kl = mean(s.k3_sum);
  d.mismatch_kl = -mean(s.lr_sum);
  d.chi2_token = at::where(tokens > 0, mean(s.rho2_sum) - 1, at::zeros_like(tokens));

  const torch::Tensor nonempty_row = s.count > 0;
  const torch::Tensor kept_row = a.kept_count > 0;
  torch::Tensor traj_tokens = s.count, traj_kept = a.kept_count, traj_lr = s.lr_sum;
  if (traj.defined()) {
    traj_tokens = per_trajectory(s.count, traj, num_traj);
    traj_kept = per_trajectory(a.kept_count, traj, num_traj);
    traj_lr = per_trajectory(s.lr_sum, traj, num_traj);
  }
  const torch::Tensor traj_nonempty = traj_tokens > 0;
  const torch::Tensor n_traj = traj_nonempty.sum().to(at::kDouble);
  const torch::Tensor rho2_seq = masked_fill_zero(safe_exp(traj_lr).square(), traj_nonempty).sum();
  d.chi2_sequence = at::where(n_traj > 0, rho2_seq / n_traj.clamp_min(1) - 1, at::zeros_like(n_traj));
  d.training_ppl = perplexity(s.old_sum, s.count, nonempty_row);
  d.rollout_ppl = perplexity(s.rollout_sum, s.count, nonempty_row);
  // ESS = 1 / mean((w / mean w)²) = (Σw)² / (n Σw²).
  d.ess = at::where(a.w2_sum > 0, a.w_sum.square() / (tokens * a.w2_sum).clamp_min(1e-300), at::ones_like(a.w_sum));

  const torch::Tensor rows = nonempty_row.sum().to(at::kDouble);
  d.rejected_token_fraction = fraction(tokens - a.kept_count.sum(), tokens);
  d.rejected_row_fraction = fraction((nonempty_row & ~kept_row).sum().to(at::kDouble), rows);
  d.rejected_trajectory_fraction = fraction((traj_nonempty & ~(traj_kept > 0)).sum().to(at::kDouble), n_traj);
  d.vetoed_row_fraction = fraction((nonempty_row & s.veto).sum().to(at::kDouble), rows);
  for (torch::Tensor* t : {&d.log_ratio_abs_mean, &d.log_ratio_abs_max, &d.k3_kl, &d.mismatch_kl, &d.chi2_token,
                           &d.chi2_sequence, &d.training_ppl, &d.rollout_ppl, &d.ess, &d.rejected_token_fraction,
                           &d.rejected_row_fraction, &d.rejected_trajectory_fraction, &d.vetoed_row_fraction})
    *t = t->to(type);
  return d;
}

}  // namespace

namespace detail {

void check_trajectory_ids(const torch::Tensor& traj, int64_t num_trajectories) {
  const torch::Tensor bad = ((traj < 0) | (traj >= num_trajectories)).nonzero();
  if (bad.size(0) == 0) return;
  const int64_t row = bad[0][0].item<int64_t>();
  fail("mismatch: traj[{}] = {} is out of range; allowed: [0, num_trajectories = {})", row, traj[row].item<int64_t>(),
       num_trajectories);
}

}  // namespace detail

torch::Tensor mismatch_log_ratio(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp,
                                 const torch::Tensor& response_mask) {
  const at::ScalarType type = compute_type(old_logp);
  const torch::Tensor diff = old_logp.to(type) - rollout_logp.to(type);
  const torch::Tensor lr = at::nan_to_num(diff, 0.0, kMismatchLogRatioLimit, -kMismatchLogRatioLimit)
                               .clamp(-kMismatchLogRatioLimit, kMismatchLogRatioLimit);
  return masked_fill_zero(lr, response_mask);
}

torch::Tensor aggregate_log_ratio(const torch::Tensor& log_ratio, const torch::Tensor& response_mask,
                                  MismatchLevel level, const torch::Tensor& traj, int64_t num_trajectories) {
  const Sums s = level_sums(log_ratio.sum(1), response_mask.sum(1).to(log_ratio.scalar_type()), traj, num_trajectories);
  return level_log(log_ratio, s, level);
}

torch::Tensor importance_ratio(const torch::Tensor& log_ratio, const torch::Tensor& response_mask,
                               MismatchLevel level, const torch::Tensor& traj, int64_t num_trajectories) {
  return safe_exp(aggregate_log_ratio(log_ratio, response_mask, level, traj, num_trajectories));
}

MismatchResult compute_mismatch(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp,
                                const torch::Tensor& response_mask, const torch::Tensor& traj,
                                int64_t num_trajectories, const MismatchOptions& options) {
  if (options.bypass) {
    // old_logp := rollout_logp: every log ratio is 0, nothing is rejected, every weight is 1.
    const MismatchOptions identity = MismatchOptions()
                                         .with_rs(MismatchLevel::off, 1.0)
                                         .with_veto_threshold(0)
                                         .with_check_finite(options.check_finite)
                                         .with_fused(options.fused);
    return compute_mismatch(rollout_logp, rollout_logp, response_mask, traj, num_trajectories, identity);
  }
  check_inputs(old_logp, rollout_logp, response_mask, traj, num_trajectories);
  check_options(options);
  const at::NoGradGuard no_grad;
  const torch::Tensor mask = response_mask.to(at::kBool).contiguous();
  const at::ScalarType type = compute_type(old_logp);
  const torch::Tensor old = old_logp.detach().to(type).contiguous(), rollout = rollout_logp.detach().to(type).contiguous();
#ifdef TURNRL_WITH_CUDA
  if (options.fused && detail::mismatch_cuda_applies(old, rollout, mask)) {
    MismatchResult result;
    if (detail::compute_mismatch_cuda(old, rollout, mask, traj, num_trajectories, options, veto_log(options), result))
      return result;
    check_finite(old, rollout, mask);  // the kernels saw a NaN on a valid token: throws naming it
    fail("mismatch: a valid token has a NaN log-prob");
  }
#endif
  if (traj.defined() && traj.device().is_cpu()) detail::check_trajectory_ids(traj, num_trajectories);  // no sync
  const bool cpu = use_cpu_loops(old, rollout, mask, options);
  if (options.check_finite && mask.numel() > 0 && !cpu) check_finite(old, rollout, mask);

  // Pass 1: row statistics (the CPU loops also flag NaN); then the row-level decisions (all
  // aggregates use the input mask).
  RowStats stats;
  if (cpu) AT_DISPATCH_FLOATING_TYPES(type, "mismatch_rows", [&] { stats = row_stats_cpu<scalar_t>(old, rollout, mask, options); });
  else stats = row_stats_tensor_ops(old, rollout, mask, options);
  if (cpu && options.check_finite && stats.nan.any().item<bool>()) check_finite(old, rollout, mask);  // throws
  const Sums sums = level_sums(stats.lr_sum, stats.count, traj, num_trajectories);
  RowPlan plan;
  plan.keep_row = ~stats.veto;
  if (is_row_level(options.rs_level)) {
    const torch::Tensor rho = safe_exp(row_level_aggregate(sums, options.rs_level));
    plan.keep_row = plan.keep_row & (rho >= options.rs_lower) & (rho <= options.rs_upper);
  }
  if (is_row_level(options.rs_k3_level)) {
    const Sums k3 = level_sums(stats.k3_sum, stats.count, traj, num_trajectories);
    plan.keep_row = plan.keep_row & (row_level_aggregate(k3, options.rs_k3_level) <= options.rs_k3_upper);
  }
  if (is_row_level(options.is_level)) plan.is_log = row_level_aggregate(sums, options.is_level);

  // Pass 2: the new mask and the weights.
  Applied applied;
  if (cpu) AT_DISPATCH_FLOATING_TYPES(type, "mismatch_apply", [&] { applied = apply_cpu<scalar_t>(old, rollout, mask, plan, options); });
  else applied = apply_tensor_ops(old, rollout, mask, plan, options);

  MismatchResult result;
  result.response_mask = applied.mask;
  result.weights = applied.weights;
  result.diagnostics = diagnose(stats, applied, traj, num_trajectories, type);
  return result;
}

MismatchResult compute_mismatch(const TurnBatch& batch, const MismatchOptions& options) {
  if (!batch.old_logp.defined() && !options.bypass)
    fail("mismatch: TurnBatch.old_logp (trainer log-probs, float [N, L]) is required (unless mismatch.bypass)");
  if (!batch.rollout_logp.defined())
    fail("mismatch: TurnBatch.rollout_logp (rollout log-probs, float [N, L]) is required");
  return compute_mismatch(batch.old_logp, batch.rollout_logp, batch.response_mask, batch.traj, batch.num_trajectories,
                          options);
}

std::map<std::string, double> MismatchDiagnostics::to_map() const {
  const std::pair<const char*, const torch::Tensor*> fields[] = {
      {"log_ratio_abs_mean", &log_ratio_abs_mean},
      {"log_ratio_abs_max", &log_ratio_abs_max},
      {"k3_kl", &k3_kl},
      {"mismatch_kl", &mismatch_kl},
      {"chi2_token", &chi2_token},
      {"chi2_sequence", &chi2_sequence},
      {"training_ppl", &training_ppl},
      {"rollout_ppl", &rollout_ppl},
      {"ess", &ess},
      {"rejected_token_fraction", &rejected_token_fraction},
      {"rejected_row_fraction", &rejected_row_fraction},
      {"rejected_trajectory_fraction", &rejected_trajectory_fraction},
      {"vetoed_row_fraction", &vetoed_row_fraction},
  };
  std::map<std::string, double> out;
  for (const auto& f : fields)
    if (f.second->defined()) out[std::string("mismatch/") + f.first] = f.second->item<double>();
  return out;
}

template <typename V>
static void describe(V& v, MismatchOptions& o) {
  const std::vector<std::string> levels = {"off", "token", "turn", "turn_geo", "sequence", "geometric"};
  v.choice("is_level", o.is_level, levels, parse_mismatch_level, "off | token | turn | turn_geo | sequence | geometric");
  v.number("is_cap", o.is_cap, 1e-6, 1e6, "truncated IS cap");
  v.choice("rs_level", o.rs_level, levels, parse_mismatch_level, "rejection level; same names");
  v.number("rs_lower", o.rs_lower, 0.0, 1e6, "keep ratios in [rs_lower, rs_upper]; absent = 1 / rs_upper");
  v.number("rs_upper", o.rs_upper, 1e-12, 1e6, "upper end of the band");
  v.choice("rs_k3_level", o.rs_k3_level, levels, parse_mismatch_level, "k3 (KL estimate) rejection level; same names");
  v.number("rs_k3_upper", o.rs_k3_upper, 1e-12, 1e6, "keep where the level's k3 is <= this");
  v.number("veto_threshold", o.veto_threshold, 0.0, 0.999999, "reject a turn with a token ratio below; 0 = off");
  v.flag("bypass", o.bypass, "use rollout_logp as old_logp (no recompute pass)");
  v.flag("check_finite", o.check_finite, "throw on NaN log-probs");
  v.flag("fused", o.fused, "CPU two-pass implementation");
}

void write_options(ConfigWriter& w, const MismatchOptions& o) { write_described(w, o); }

void read_options(ConfigReader& r, MismatchOptions& o) {
  const bool lower_given = r.has("rs_lower");
  read_described(r, o);
  if (!lower_given && r.has("rs_upper")) o.rs_lower = 1.0 / o.rs_upper;
  if (o.bypass) {
    // Bypass leaves nothing to weigh or reject: a correction asked for in the same section is a
    // configuration mistake, not something to ignore silently.
    for (const auto& key : {std::make_pair("is_level", o.is_level), std::make_pair("rs_level", o.rs_level),
                            std::make_pair("rs_k3_level", o.rs_k3_level)})
      if (r.has(key.first) && key.second != MismatchLevel::off)
        fail("{}: '{}' has no effect with bypass: true (weights are 1, nothing is rejected); allowed: off",
             r.key_path(key.first), to_string(key.second));
    if (r.has("veto_threshold") && o.veto_threshold != 0)
      fail("{}: {} has no effect with bypass: true; allowed: 0", r.key_path("veto_threshold"), o.veto_threshold);
  }
  check_options(o);
}

MismatchLevel parse_mismatch_level(const std::string& name, const std::string& field) {
  for (MismatchLevel l : {MismatchLevel::off, MismatchLevel::token, MismatchLevel::turn, MismatchLevel::turn_geo,
                          MismatchLevel::sequence, MismatchLevel::geometric})
    if (name == to_string(l)) return l;
  fail("{}: unknown value '{}'; allowed: off, token, turn, turn_geo, sequence, geometric", field, name);
}

const char* to_string(MismatchLevel level) {
  switch (level) {
    case MismatchLevel::off: return "off";
    case MismatchLevel::token: return "token";
    case MismatchLevel::turn: return "turn";
    case MismatchLevel::turn_geo: return "turn_geo";
    case MismatchLevel::sequence: return "sequence";
    case MismatchLevel::geometric: return "geometric";
  }
  return "?";
}

}  // namespace turnrl
