#include "turnrl/algo/kl.h"

#include <algorithm>

#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"
#include "turnrl/core/masked.h"

namespace turnrl {

torch::Tensor kl_estimate(const torch::Tensor& logp, const torch::Tensor& ref_logp, const torch::Tensor& mask,
                          KLType type) {
  if (!logp.defined() || !ref_logp.defined() || !mask.defined() || logp.sizes() != ref_logp.sizes() ||
      logp.sizes() != mask.sizes())
    fail("kl: logp, ref_logp and mask must be defined and have the same shape");
  // Masked entries are replaced before any arithmetic so NaN or inf there cannot reach the
  // gradient through 0 · NaN.
  const torch::Tensor m = mask.to(at::kBool);
  const torch::Tensor d = masked_fill_zero(logp, m) - masked_fill_zero(ref_logp, m);
  torch::Tensor kl;
  switch (type) {
    case KLType::kl: kl = d; break;
    case KLType::abs: kl = d.abs(); break;
    case KLType::mse: kl = 0.5 * d.square(); break;
    case KLType::low_var_kl: {
      const torch::Tensor neg = (-d).clamp(-20, 20);
      kl = (neg.exp() - neg - 1).clamp(-10, 10);
      break;
    }
  }
  return masked_fill_zero(kl, m);
}

KLRewardPenalty kl_reward_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp, const torch::Tensor& mask,
                                  KLType type, double coef) {
  const at::NoGradGuard no_grad;
  const torch::Tensor kl = kl_estimate(logp.detach(), ref_logp.detach(), mask, type);
  KLRewardPenalty p;
  p.penalty = coef * kl.sum(1);
  p.turn_kl = masked_mean(kl, mask, 1);
  const torch::Tensor nonempty = mask.to(at::kBool).any(1);
  p.batch_kl = masked_fill_zero(p.turn_kl, nonempty).sum() / nonempty.sum().to(kl.scalar_type()).clamp_min(1);
  return p;
}

KLController::KLController(const KLControllerOptions& options) : options_(options), coef_(options.coef) {
  if (!(options.coef >= 0)) fail("kl.coef: {} is out of range; allowed: >= 0", options.coef);
  if (options.adaptive && !(options.target > 0)) fail("kl.target: {} is out of range; allowed: > 0", options.target);
  if (options.adaptive && !(options.horizon > 0)) fail("kl.horizon: {} is out of range; allowed: > 0", options.horizon);
}

void KLController::update(double current_kl, int64_t n_steps) {
  if (!options_.adaptive) return;
  const double error = std::clamp(current_kl / options_.target - 1.0, -0.2, 0.2);
  coef_ *= 1.0 + error * double(n_steps) / options_.horizon;
}

void read_options(ConfigReader& r, KLControllerOptions& o) {
  std::string type = to_string(o.type);
  r.flag("adaptive", o.adaptive)
      .number("coef", o.coef, 0.0, 1e6)
      .number("target", o.target, 1e-12, 1e6)
      .number("horizon", o.horizon, 1.0, 1e12)
      .choice("type", type, {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"});
  o.type = parse_kl_type(type, r.key_path("type"));
}

KLType parse_kl_type(const std::string& name, const std::string& field) {
  if (name == "kl" || name == "k1") return KLType::kl;
  if (name == "abs") return KLType::abs;
  if (name == "mse" || name == "k2") return KLType::mse;
  if (name == "low_var_kl" || name == "k3") return KLType::low_var_kl;
  fail("{}: unknown value '{}'; allowed: kl (k1), abs, mse (k2), low_var_kl (k3)", field, name);
}

const char* to_string(KLType type) {
  switch (type) {
    case KLType::kl: return "kl";
    case KLType::abs: return "abs";
    case KLType::mse: return "mse";
    case KLType::low_var_kl: return "low_var_kl";
  }
  return "?";
}

}  // namespace turnrl
