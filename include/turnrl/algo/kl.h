#pragma once
// KL divergence to a reference policy, per token, with verl's estimators (docs/algorithms.md), used as a
// loss term (policy_loss.h, kl_loss_coef) or as a penalty subtracted from the turn rewards with a
// fixed or adaptive coefficient.
//
//   logp      float [N, L]  log-probs of the sampled tokens under the policy
//   ref_logp  float [N, L]  the same under the reference policy
//   mask      bool  [N, L]  valid tokens; masked entries are 0 in every result, whatever their values
#include <cstdint>
#include <string>

#include <torch/types.h>

namespace turnrl {

class ConfigReader;

// Estimators of KL(π || π_ref) from samples of π, with d = logp − ref_logp:
enum class KLType {
  kl,          // k1: d
  abs,         // |d|
  mse,         // k2: ½ d²
  low_var_kl,  // k3: e^{−d} + d − 1, exponent clamped to ±20, result clamped to [−10, 10] (verl)
};

// The per-token estimate, [N, L], 0 on masked tokens; differentiable in logp (and ref_logp).
torch::Tensor kl_estimate(const torch::Tensor& logp, const torch::Tensor& ref_logp, const torch::Tensor& mask,
                          KLType type);

// KL in the reward: per turn, penalty = coef · Σ_tokens kl; the caller subtracts it from the turn's
// reward. Computed without gradient.
struct KLRewardPenalty {
  torch::Tensor penalty;   // float [N]: coef · Σ_k m_k kl_k
  torch::Tensor turn_kl;   // float [N]: masked mean of kl over the turn's tokens (0 when empty)
  torch::Tensor batch_kl;  // 0-dim: mean of turn_kl over non-empty turns (what the controller tracks)
};
KLRewardPenalty kl_reward_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp, const torch::Tensor& mask,
                                  KLType type, double coef);

struct KLControllerOptions {
  bool adaptive = false;   // false: the coefficient stays `coef`
  double coef = 0.001;     // initial (or fixed) β
  double target = 0.1;     // adaptive: target KL per turn
  double horizon = 10000;  // adaptive: samples over which β may change by a factor e^{±0.2}
  KLType type = KLType::low_var_kl;

  KLControllerOptions& with_adaptive(bool v) { adaptive = v; return *this; }
  KLControllerOptions& with_coef(double v) { coef = v; return *this; }
  KLControllerOptions& with_target(double v) { target = v; return *this; }
  KLControllerOptions& with_horizon(double v) { horizon = v; return *this; }
  KLControllerOptions& with_type(KLType v) { type = v; return *this; }
};

// β for KL in the reward. Adaptive (Ziegler et al., as verl): after each step with current KL
// `kl` measured over n_steps samples, β ← β · (1 + clip(kl/target − 1, ±0.2) · n_steps/horizon).
class KLController {
 public:
  explicit KLController(const KLControllerOptions& options = {});
  double coef() const { return coef_; }
  void update(double current_kl, int64_t n_steps);

 private:
  KLControllerOptions options_;
  double coef_;
};

// Reads the YAML keys adaptive, coef, target, horizon, type.
void read_options(ConfigReader& reader, KLControllerOptions& options);

// "kl" | "abs" | "mse" | "low_var_kl" (aliases k1, k2, k3); throws naming `field`.
KLType parse_kl_type(const std::string& name, const std::string& field = "kl.type");
const char* to_string(KLType type);

}  // namespace turnrl
