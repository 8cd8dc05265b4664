#include "turnrl/model/chunked_logp.h"

#include <cmath>

#include <torch/csrc/autograd/custom_function.h>

#include "turnrl/core/error.h"
#ifdef TURNRL_WITH_CUDA
#include "fused_decoder.h"
#endif

namespace turnrl {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One chunk's float32 log-softmax of hidden_chunk · weightᵀ / temperature.
torch::Tensor chunk_log_probs(const torch::Tensor& hidden_chunk, const torch::Tensor& weight, double temperature) {
  return at_temperature(torch::matmul(hidden_chunk, weight.t()).to(torch::kFloat), temperature).log_softmax(-1);
}

struct ChunkedLogpFunction : torch::autograd::Function<ChunkedLogpFunction> {
  // fused: the one-pass kernels (decided by chunked_logp_entropy: a CUDA build and a GPU tensor).
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t chunk_rows, bool fused, double temperature) {
    const int64_t rows = hidden.size(0);
    const auto float_options = torch::TensorOptions(torch::kFloat).device(hidden.device());
    torch::Tensor logp = torch::empty({rows}, float_options), entropy = torch::empty({rows}, float_options);
    torch::Tensor lse = fused ? torch::empty({rows}, float_options) : torch::Tensor();
    for (int64_t start = 0; start < rows; start += chunk_rows) {
      const int64_t len = std::min(chunk_rows, rows - start);
#ifdef TURNRL_WITH_CUDA
      if (fused) {
        const detail::RowSoftmax r = detail::fused_logp_entropy(torch::matmul(hidden.narrow(0, start, len), weight.t()),
                                                                targets.narrow(0, start, len), temperature);
        lse.narrow(0, start, len).copy_(r.lse);
        logp.narrow(0, start, len).copy_(r.logp);
        entropy.narrow(0, start, len).copy_(r.entropy);
        continue;
      }
#endif
      const torch::Tensor log_probs = chunk_log_probs(hidden.narrow(0, start, len), weight, temperature);
      logp.narrow(0, start, len).copy_(log_probs.gather(-1, targets.narrow(0, start, len).unsqueeze(-1)).squeeze(-1));
      entropy.narrow(0, start, len).copy_(-(log_probs.exp() * log_probs).sum(-1));
    }
    // An output nobody differentiates then arrives as an undefined gradient, and its term is skipped.
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({hidden, weight, targets, entropy, lse});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["temperature"] = temperature;
    return {logp, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2], &entropy = saved[3],
                        &lse = saved[4];
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const torch::Tensor &grad_logp = grads[0], &grad_entropy = grads[1];
    const bool need_hidden = ctx->needs_input_grad(0), need_weight = ctx->needs_input_grad(1);
    torch::Tensor grad_hidden = need_hidden ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor grad_weight = need_weight ? torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat))
                                            : torch::Tensor();
    const int64_t rows = hidden.size(0);
    for (int64_t start = 0; start < rows && (need_hidden || need_weight); start += chunk_rows) {
      const int64_t len = std::min(chunk_rows, rows - start);
      const torch::Tensor hidden_chunk = hidden.narrow(0, start, len);
      const auto chunk_of = [&](const torch::Tensor& t) { return t.defined() ? t.narrow(0, start, len) : t; };
#ifdef TURNRL_WITH_CUDA
      if (lse.defined()) {
        const torch::Tensor grad_logits = detail::fused_logp_entropy_backward(
            torch::matmul(hidden_chunk, weight.t()), chunk_of(targets), chunk_of(lse), chunk_of(entropy),
            chunk_of(grad_logp), chunk_of(grad_entropy), temperature);
        if (need_hidden) grad_hidden.narrow(0, start, len).copy_(torch::matmul(grad_logits, weight));
        if (need_weight) grad_weight.add_(torch::matmul(grad_logits.t(), hidden_chunk).to(torch::kFloat));
        continue;
      }
#endif
      const torch::Tensor log_probs = chunk_log_probs(hidden_chunk, weight, temperature);
      const torch::Tensor probs = log_probs.exp();
      torch::Tensor grad_logits = torch::zeros_like(log_probs);
      if (grad_logp.defined()) {
        const torch::Tensor g = grad_logp.narrow(0, start, len).unsqueeze(-1);
        grad_logits = grad_logits - probs * g;
        grad_logits.scatter_add_(-1, targets.narrow(0, start, len).unsqueeze(-1), g);
      }
      if (grad_entropy.defined())
        grad_logits = grad_logits - probs * (log_probs + entropy.narrow(0, start, len).unsqueeze(-1)) *
                                        grad_entropy.narrow(0, start, len).unsqueeze(-1);
      // Through the division by the temperature; the unchunked graph then casts the gradient back to
      // the logits' dtype before the matmul.
      if (temperature != 1.0) grad_logits = grad_logits / temperature;
      grad_logits = grad_logits.to(hidden.scalar_type());
      if (need_hidden) grad_hidden.narrow(0, start, len).copy_(torch::matmul(grad_logits, weight));
      if (need_weight) grad_weight.add_(torch::matmul(grad_logits.t(), hidden_chunk).to(torch::kFloat));
    }
    if (need_weight) grad_weight = grad_weight.to(weight.scalar_type());
    return {grad_hidden, grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void check_logp_temperature(double temperature, const char* caller) {
  if (!(temperature > 0) || !std::isfinite(temperature))
    fail("{}: temperature {} must be finite and > 0", caller, temperature);
}

torch::Tensor at_temperature(const torch::Tensor& logits, double temperature) {
  return temperature == 1.0 ? logits : logits / temperature;
}

RowLogp chunked_logp_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             int64_t chunk_rows, bool fused_kernels, double temperature) {
  if (chunk_rows < 1) fail("model.logp_chunk_size: {} is out of range; allowed: >= 1", chunk_rows);
  check_logp_temperature(temperature, "chunked_logp_entropy");
  if (hidden.dim() != 2 || weight.dim() != 2 || hidden.size(1) != weight.size(1))
    fail("chunked_logp_entropy: hidden {} must be [K, H] and weight {} [V, H]", c10::str(hidden.sizes()),
         c10::str(weight.sizes()));
  if (targets.dim() != 1 || targets.size(0) != hidden.size(0) || targets.scalar_type() != torch::kLong)
    fail("chunked_logp_entropy: targets {} ({}) must be int64 [K] with K = {}", c10::str(targets.sizes()),
         c10::toString(targets.scalar_type()), hidden.size(0));
  if (hidden.scalar_type() != weight.scalar_type())
    fail("chunked_logp_entropy: hidden is {}, weight {}; they must match", c10::toString(hidden.scalar_type()),
         c10::toString(weight.scalar_type()));
#ifdef TURNRL_WITH_CUDA
  const bool fused = fused_kernels && detail::fused_kernels_supported(hidden);
#else
  const bool fused = false;
  (void)fused_kernels;
#endif
  const variable_list out = ChunkedLogpFunction::apply(hidden, weight, targets, chunk_rows, fused, temperature);
  return {out[0], out[1]};
}

}  // namespace turnrl
