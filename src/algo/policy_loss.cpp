#include "turnrl/algo/policy_loss.h"

#include <algorithm>
#include <cmath>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"
#include "turnrl/core/masked.h"

#ifdef TURNRL_WITH_CUDA
#include "policy_loss_cuda.h"
#endif

namespace turnrl {
namespace {

constexpr double kRatioLogBound = kPPORatioLogBound;

std::string shape_of(const torch::Tensor& t) {
  return t.defined() ? fmt::format("{}", fmt::join(t.sizes(), "x")) : std::string("undefined");
}

void check_options(const PPOLossOptions& o) {
  if (!(o.clip_low >= 0 && o.clip_low < 1)) fail("policy_loss.clip_low: {} is out of range; allowed: [0, 1)", o.clip_low);
  if (!(o.clip_high >= 0)) fail("policy_loss.clip_high: {} is out of range; allowed: >= 0", o.clip_high);
  if (!(o.dual_clip == 0 || o.dual_clip > 1))
    fail("policy_loss.dual_clip: {} is out of range; allowed: > 1, or 0 to disable", o.dual_clip);
  if (!(o.loss_scale_factor > 0))
    fail("policy_loss.loss_scale_factor: {} is out of range; allowed: > 0", o.loss_scale_factor);
  if (!(o.norm_length >= 0)) fail("policy_loss.norm_length: {} is out of range; allowed: >= 0 (0 = padded width)", o.norm_length);
}

void check_token_tensor(const char* name, const torch::Tensor& t, const torch::Tensor& mask, bool required) {
  if (!t.defined()) {
    if (required) fail("policy_loss: {} (float [N, L]) is required", name);
    return;
  }
  if (t.sizes() != mask.sizes())
    fail("policy_loss: {} has shape {}; must match response_mask's {}", name, shape_of(t), shape_of(mask));
  if (!at::isFloatingType(t.scalar_type()))
    fail("policy_loss: {} dtype {} not allowed; must be a floating type", name, c10::toString(t.scalar_type()));
}

void check_inputs(const PolicyLossInputs& in, const PPOLossOptions& o) {
  const torch::Tensor& m = in.response_mask;
  if (!m.defined() || m.dim() != 2) fail("policy_loss: response_mask must be [N, L]; got {}", shape_of(m));
  check_token_tensor("logp", in.logp, m, true);
  check_token_tensor("old_logp", in.old_logp, m, true);
  check_token_tensor("weights", in.weights, m, false);
  check_token_tensor("entropy", in.entropy, m, o.entropy_coef != 0);
  check_token_tensor("ref_logp", in.ref_logp, m, o.kl_loss_coef != 0);
  const torch::Tensor& a = in.advantages;
  const bool per_turn = a.defined() && a.dim() == 1 && a.size(0) == m.size(0);
  const bool per_token = a.defined() && a.sizes() == m.sizes();
  if (!per_turn && !per_token)
    fail("policy_loss: advantages must be [N] (one per turn) or [N, L] with [N, L] = {}; got {}", shape_of(m),
         shape_of(a));
}

// Advantages as [N, L] or [N, 1] (broadcast), in `type`.
torch::Tensor broadcastable_advantages(const torch::Tensor& a, at::ScalarType type) {
  return (a.dim() == 1 ? a.unsqueeze(1) : a).to(type);
}

// Per-row multiplier c_r with aggregate = Σ_r c_r Σ_k m ℓ: the scalar definitions of the modes.
torch::Tensor row_coefficients(const torch::Tensor& mask, LossAggMode mode, double norm_length, at::ScalarType type) {
  const torch::Tensor count = mask.sum(1).to(type);
  const torch::Tensor rows = (count > 0).sum().to(type).clamp_min(1);
  switch (mode) {
    case LossAggMode::token_mean: return (1 / count.sum().clamp_min(1)).expand_as(count);
    case LossAggMode::seq_mean_token_sum: return (1 / rows).expand_as(count);
    case LossAggMode::seq_mean_token_mean: return 1 / (count.clamp_min(1) * rows);
    case LossAggMode::seq_mean_token_sum_norm:
      return at::full_like(count, 1.0 / (norm_length > 0 ? norm_length : double(std::max<int64_t>(mask.size(1), 1))));
    case LossAggMode::seq_sum_no_norm: return at::ones_like(count);
  }
  fail("policy_loss: unknown aggregation mode");
}

// The elementwise PPO quantities, with masked entries replaced by 0 before any arithmetic so that
// NaN or inf there reaches neither the loss nor the gradient.
struct TokenTerms {
  torch::Tensor ratio;     // ρ
  torch::Tensor clipped;   // ℓ_clip
  torch::Tensor dual;      // bool: the dual clip binds (A < 0 and −A c < ℓ_clip)
  torch::Tensor loss;      // ℓ, 0 on masked tokens
  torch::Tensor adv;       // A, 0 on masked tokens
};

TokenTerms token_terms(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& advantages,
                       const torch::Tensor& mask, const PPOLossOptions& o) {
  TokenTerms t;
  t.adv = masked_fill_zero(broadcastable_advantages(advantages, logp.scalar_type()).expand_as(logp), mask);
  const torch::Tensor log_ratio = masked_fill_zero(logp, mask) - masked_fill_zero(old_logp.to(logp.scalar_type()), mask);
  t.ratio = log_ratio.clamp(-kRatioLogBound, kRatioLogBound).exp();
  const torch::Tensor unclipped = -t.adv * t.ratio;
  t.clipped = at::max(unclipped, -t.adv * t.ratio.clamp(1 - o.clip_low, 1 + o.clip_high));
  if (o.dual_clip > 0) {
    const torch::Tensor dual_loss = -t.adv * o.dual_clip;
    t.dual = (t.adv < 0) & (dual_loss < t.clipped);
    t.loss = at::where(t.adv < 0, at::min(dual_loss, t.clipped), t.clipped);
  } else {
    t.dual = at::zeros_like(mask);
    t.loss = t.clipped;
  }
  t.loss = masked_fill_zero(t.loss, mask);
  return t;
}

// Fills the clip / ratio / KL / weight metrics from detached terms.
void ppo_metrics(const TokenTerms& t, const torch::Tensor& logp, const torch::Tensor& old_logp,
                 const torch::Tensor& mask, const torch::Tensor& weights, const PPOLossOptions& o,
                 PolicyLossMetrics& m) {
  const torch::Tensor ratio = t.ratio.detach();
  const torch::Tensor dual = t.dual & mask;
  const torch::Tensor type_one = at::ones({}, ratio.options());
  const auto frac = [&](const torch::Tensor& flags) { return masked_mean(flags.to(ratio.scalar_type()), mask); };
  m.clip_frac_lower = frac((ratio < 1 - o.clip_low) | dual);
  m.clip_frac_upper = frac((ratio > 1 + o.clip_high) & ~dual);
  m.clip_frac_dual = frac(dual);
  m.clip_frac = m.clip_frac_lower + m.clip_frac_upper;
  m.approx_kl = masked_mean(masked_fill_zero(old_logp.to(ratio.scalar_type()), mask) - masked_fill_zero(logp.detach(), mask), mask);
  m.ratio_mean = masked_mean(ratio, mask);
  m.ratio_max = ratio.numel() > 0 ? masked_fill_zero(ratio, mask).max() : at::zeros({}, ratio.options());
  m.nonzero_weight_fraction = weights.defined() ? frac(masked_fill_zero(weights, mask) != 0) : type_one;
}

// --- fused forward + hand-written backward ----------------------------------------------------

struct FusedArgs {
  torch::Tensor old_logp, advantages, mask, weights;
  const PPOLossOptions* options;
  PolicyLossMetrics* metrics;
  // c_r / loss_scale_factor, double [N].
  torch::Tensor row_coef() const {
    return row_coefficients(mask, options->agg_mode, options->norm_length, at::kDouble) / options->loss_scale_factor;
  }
};

struct FusedOut {
  torch::Tensor loss;  // 0-dim
  torch::Tensor grad;  // [N, L]: d loss / d logp, or before the row coefficient when row_coef is defined
  torch::Tensor row_coef;  // [N] or undefined: d loss / d logp = row_coef[r] · grad
};

// CPU: one pass over [N, L], rows in parallel, computing the token loss, its gradient (already
// multiplied by weight and row coefficient) and per-row metric accumulators.
enum Acc { kLoss, kLower, kUpper, kDual, kRatioSum, kRatioMax, kKlSum, kNonzero, kAccCount };

template <typename T>
void fused_cpu_rows(const FusedArgs& a, const torch::Tensor& logp, torch::Tensor& grad, torch::Tensor& acc) {
  const int64_t n = logp.size(0), len = logp.size(1);
  const torch::Tensor old = a.old_logp.to(logp.scalar_type()).contiguous();
  const torch::Tensor adv = broadcastable_advantages(a.advantages, logp.scalar_type()).contiguous();
  const torch::Tensor mask = a.mask.contiguous();
  const torch::Tensor w = a.weights.defined() ? a.weights.to(logp.scalar_type()).contiguous() : torch::Tensor();
  const torch::Tensor coef = a.row_coef().contiguous();
  const T* lp_p = logp.data_ptr<T>();
  const T* old_p = old.data_ptr<T>();
  const T* adv_p = adv.data_ptr<T>();
  const int64_t adv_row = adv.size(1) == 1 ? 1 : len, adv_col = adv.size(1) == 1 ? 0 : 1;
  const bool* m_p = mask.data_ptr<bool>();
  const T* w_p = w.defined() ? w.data_ptr<T>() : nullptr;
  const double* coef_p = coef.data_ptr<double>();
  T* g_p = grad.data_ptr<T>();
  double* acc_p = acc.data_ptr<double>();
  const double lo = 1 - a.options->clip_low, hi = 1 + a.options->clip_high, c = a.options->dual_clip;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1));
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      double s[kAccCount] = {0, 0, 0, 0, 0, 0, 0, 0};
      const double row_coef = coef_p[r];
      for (int64_t k = 0; k < len; ++k) {
        const int64_t i = r * len + k;
        if (!m_p[i]) {
          g_p[i] = T(0);
          continue;
        }
        const double A = double(adv_p[r * adv_row + k * adv_col]);
        const double d = double(lp_p[i]) - double(old_p[i]);
        const double dc = std::min(std::max(d, -kRatioLogBound), kRatioLogBound);
        const double rho = std::exp(dc);
        const double l1 = -A * rho, l2 = -A * std::min(std::max(rho, lo), hi);
        // d ℓ / d ρ: the unclipped branch's −A unless the clipped branch strictly wins.
        double loss = std::max(l1, l2), dloss = l2 > l1 ? 0.0 : -A;
        bool dual = false;
        if (c > 0 && A < 0) {
          const double l3 = -A * c;
          dual = l3 < loss;
          if (dual) dloss = 0;
          else if (l3 == loss) dloss *= 0.5;  // a tie splits the gradient, as torch's min does
          loss = std::min(loss, l3);
        }
        const double wk = w_p ? double(w_p[i]) : 1.0;
        const double inside = (d >= -kRatioLogBound && d <= kRatioLogBound) ? 1.0 : 0.0;
        g_p[i] = T(row_coef * wk * dloss * rho * inside);
        s[kLoss] += wk * loss;
        s[kLower] += (rho < lo || dual) ? 1 : 0;
        s[kUpper] += (rho > hi && !dual) ? 1 : 0;
        s[kDual] += dual ? 1 : 0;
        s[kRatioSum] += rho;
        s[kRatioMax] = std::max(s[kRatioMax], rho);
        s[kKlSum] += -d;
        s[kNonzero] += wk != 0 ? 1 : 0;
      }
      s[kLoss] *= row_coef;
      std::copy(s, s + kAccCount, acc_p + r * kAccCount);
    }
  });
}

FusedOut fused_cpu(const FusedArgs& a, const torch::Tensor& logp) {
  const torch::Tensor lp = logp.contiguous();
  torch::Tensor grad = at::empty_like(lp);
  torch::Tensor acc = at::zeros({lp.size(0), kAccCount}, lp.options().dtype(at::kDouble));
  AT_DISPATCH_FLOATING_TYPES(lp.scalar_type(), "fused_ppo_cpu", [&] { fused_cpu_rows<scalar_t>(a, lp, grad, acc); });
  const torch::Tensor totals = acc.sum(0);
  const torch::Tensor tokens = a.mask.sum().to(at::kDouble).clamp_min(1);
  PolicyLossMetrics& m = *a.metrics;
  const auto as_type = [&](const torch::Tensor& t) { return t.to(lp.scalar_type()); };
  m.clip_frac_lower = as_type(totals[kLower] / tokens);
  m.clip_frac_upper = as_type(totals[kUpper] / tokens);
  m.clip_frac_dual = as_type(totals[kDual] / tokens);
  m.clip_frac = m.clip_frac_lower + m.clip_frac_upper;
  m.ratio_mean = as_type(totals[kRatioSum] / tokens);
  m.ratio_max = as_type(acc.select(1, kRatioMax).max());
  m.approx_kl = as_type(totals[kKlSum] / tokens);
  m.nonzero_weight_fraction = as_type(a.mask.any().to(at::kDouble) * totals[kNonzero] / tokens +
                                      (~a.mask.any()).to(at::kDouble));
  return {as_type(totals[kLoss]), grad, {}};
}

// Other devices: the same quantities with whole-tensor ops, outside autograd.
FusedOut fused_tensor_ops(const FusedArgs& a, const torch::Tensor& logp) {
  const PPOLossOptions& o = *a.options;
  const TokenTerms t = token_terms(logp, a.old_logp, a.advantages, a.mask, o);
  const torch::Tensor w = a.weights.defined() ? masked_fill_zero(a.weights.to(logp.scalar_type()), a.mask)
                                              : a.mask.to(logp.scalar_type());
  const torch::Tensor unclipped = -t.adv * t.ratio;
  torch::Tensor dloss = at::where(t.clipped > unclipped, at::zeros({}, t.adv.options()), -t.adv);
  if (o.dual_clip > 0) {
    const torch::Tensor tie = (t.adv < 0) & (-t.adv * o.dual_clip == t.clipped);
    dloss = at::where(t.dual, at::zeros({}, dloss.options()), at::where(tie, 0.5 * dloss, dloss));
  }
  const torch::Tensor d = masked_fill_zero(logp, a.mask) - masked_fill_zero(a.old_logp.to(logp.scalar_type()), a.mask);
  const torch::Tensor inside = (d >= -kRatioLogBound) & (d <= kRatioLogBound);
  const torch::Tensor coef = a.row_coef().to(logp.scalar_type()).unsqueeze(1);
  FusedOut out;
  out.grad = masked_fill_zero(coef * w * dloss * t.ratio, inside);
  out.loss = ((t.loss * w).sum(1) * coef.squeeze(1)).sum();
  ppo_metrics(t, logp, a.old_logp, a.mask, a.weights, o, *a.metrics);
  return out;
}

#ifdef TURNRL_WITH_CUDA
FusedOut fused_cuda(const FusedArgs& a, const torch::Tensor& logp) {
  const detail::FusedPPOLossCuda out =
      detail::ppo_loss_cuda(logp, a.old_logp, a.advantages, a.mask, a.weights, *a.options, *a.metrics);
  return {out.loss, out.grad, out.coef};
}
#endif

FusedOut fused_forward(const FusedArgs& a, const torch::Tensor& logp) {
  const bool float_or_double = logp.scalar_type() == at::kFloat || logp.scalar_type() == at::kDouble;
  if (logp.device().is_cpu() && float_or_double) return fused_cpu(a, logp);
#ifdef TURNRL_WITH_CUDA
  if (detail::ppo_loss_cuda_applies(logp, a.mask)) return fused_cuda(a, logp);
#endif
  return fused_tensor_ops(a, logp);
}

class FusedPPOLoss : public torch::autograd::Function<FusedPPOLoss> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logp, const FusedArgs* a) {
    const FusedOut out = fused_forward(*a, logp);
    if (out.row_coef.defined()) ctx->save_for_backward({out.grad, out.row_coef});
    else ctx->save_for_backward({out.grad});
    return out.loss;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& g = grad_outputs[0];
    if (saved.size() == 2) return {saved[0] * (saved[1] * g).unsqueeze(1), torch::Tensor()};
    return {saved[0] * g, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ppo_token_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& advantages,
                             const torch::Tensor& response_mask, const PPOLossOptions& options) {
  check_options(options);
  return token_terms(logp, old_logp.detach(), advantages.detach(), response_mask.to(at::kBool), options).loss;
}

torch::Tensor aggregate_loss(const torch::Tensor& token_values, const torch::Tensor& response_mask, LossAggMode mode,
                             double norm_length) {
  const torch::Tensor mask = response_mask.to(at::kBool);
  const torch::Tensor coef = row_coefficients(mask, mode, norm_length, token_values.scalar_type());
  return (masked_fill_zero(token_values, mask).sum(1) * coef).sum();
}

PolicyLossResult policy_loss(const PolicyLossInputs& in, const PPOLossOptions& o) {
  check_options(o);
  check_inputs(in, o);
  const torch::Tensor mask = in.response_mask.to(at::kBool);
  const torch::Tensor weights = in.weights.defined() ? in.weights.detach() : torch::Tensor();
  PolicyLossResult result;
  PolicyLossMetrics& m = result.metrics;

  if (o.fused) {
    FusedArgs args{in.old_logp.detach(), in.advantages.detach(), mask, weights, &o, &m};
    m.pg_loss = FusedPPOLoss::apply(in.logp, &args);
  } else {
    const TokenTerms t = token_terms(in.logp, in.old_logp.detach(), in.advantages.detach(), mask, o);
    const torch::Tensor token_loss = weights.defined() ? t.loss * masked_fill_zero(weights, mask) : t.loss;
    m.pg_loss = aggregate_loss(token_loss, mask, o.agg_mode, o.norm_length) / o.loss_scale_factor;
    ppo_metrics(t, in.logp, in.old_logp, mask, weights, o, m);
  }

  result.loss = m.pg_loss;
  if (in.entropy.defined()) {
    m.entropy = masked_mean(in.entropy.detach(), mask);
    if (o.entropy_coef != 0)
      result.loss = result.loss -
                    o.entropy_coef * aggregate_loss(in.entropy, mask, o.agg_mode, o.norm_length) / o.loss_scale_factor;
  }
  if (o.kl_loss_coef != 0) {
    m.kl_loss = aggregate_loss(kl_estimate(in.logp, in.ref_logp.detach(), mask, o.kl_type), mask, o.agg_mode,
                               o.norm_length) / o.loss_scale_factor;
    result.loss = result.loss + o.kl_loss_coef * m.kl_loss;
  }
  return result;
}

std::map<std::string, double> PolicyLossMetrics::to_map() const {
  const std::pair<const char*, const torch::Tensor*> fields[] = {
      {"pg_loss", &pg_loss},
      {"clip_frac", &clip_frac},
      {"clip_frac_lower", &clip_frac_lower},
      {"clip_frac_upper", &clip_frac_upper},
      {"clip_frac_dual", &clip_frac_dual},
      {"approx_kl", &approx_kl},
      {"ratio_mean", &ratio_mean},
      {"ratio_max", &ratio_max},
      {"nonzero_weight_fraction", &nonzero_weight_fraction},
      {"entropy", &entropy},
      {"kl_loss", &kl_loss},
  };
  std::map<std::string, double> out;
  for (const auto& f : fields)
    if (f.second->defined()) out[std::string("actor/") + f.first] = f.second->detach().item<double>();
  return out;
}

template <typename V>
static void describe(V& v, PPOLossOptions& o) {
  v.number("clip_low", o.clip_low, 0.0, 0.999999, "epsilon_low; [0, 1)");
  v.number("clip_high", o.clip_high, 0.0, 1e6, "epsilon_high (clip-higher)");
  v.number("dual_clip", o.dual_clip, 0.0, 1e6, "c > 1; 0 = off");
  v.choice("agg_mode", o.agg_mode,
           {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "seq-sum-no-norm"},
           parse_loss_agg_mode,
           "token-mean | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm | seq-sum-no-norm");
  v.number("loss_scale_factor", o.loss_scale_factor, 1e-12, 1e12, "the aggregated loss is divided by this");
  v.number("norm_length", o.norm_length, 0.0, 1e12, "seq-mean-token-sum-norm divisor; 0 = padded width");
  v.number("entropy_coef", o.entropy_coef, -1e6, 1e6, "entropy bonus");
  v.number("kl_loss_coef", o.kl_loss_coef, 0.0, 1e6, "the built-in trainer needs 0 (no reference policy)");
  v.choice("kl_type", o.kl_type, {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"}, parse_kl_type,
           "kl | abs | mse | low_var_kl");
  v.flag("fused", o.fused, "hand-written backward");
}

void read_options(ConfigReader& r, PPOLossOptions& o) {
  read_described(r, o);
  check_options(o);
}

void write_options(ConfigWriter& w, const PPOLossOptions& o) { write_described(w, o); }

LossAggMode parse_loss_agg_mode(const std::string& name, const std::string& field) {
  for (LossAggMode m : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum, LossAggMode::seq_mean_token_mean,
                        LossAggMode::seq_mean_token_sum_norm, LossAggMode::seq_sum_no_norm})
    if (name == to_string(m)) return m;
  fail("{}: unknown value '{}'; allowed: token-mean, seq-mean-token-sum, seq-mean-token-mean, "
       "seq-mean-token-sum-norm, seq-sum-no-norm",
       field, name);
}

const char* to_string(LossAggMode mode) {
  switch (mode) {
    case LossAggMode::token_mean: return "token-mean";
    case LossAggMode::seq_mean_token_sum: return "seq-mean-token-sum";
    case LossAggMode::seq_mean_token_mean: return "seq-mean-token-mean";
    case LossAggMode::seq_mean_token_sum_norm: return "seq-mean-token-sum-norm";
    case LossAggMode::seq_sum_no_norm: return "seq-sum-no-norm";
  }
  return "?";
}

}  // namespace turnrl
