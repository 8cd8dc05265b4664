#include "turnrl/model/rope.h"

#include <cmath>

#include "turnrl/core/error.h"

namespace turnrl {

torch::Tensor rope_inverse_frequencies(const RopeSettings& r, int64_t head_dim) {
  if (head_dim < 2 || head_dim % 2 != 0) fail("rope: head_dim {}; must be even and >= 2", head_dim);
  const torch::Tensor exponents = torch::arange(0, head_dim, 2, torch::kLong).to(torch::kFloat) / double(head_dim);
  const torch::Tensor inv_freq = torch::pow(r.theta, exponents).reciprocal();
  if (r.type == "default") return inv_freq;
  if (r.type != "llama3") fail("rope.rope_type: '{}'; supported: default, llama3", r.type);
  // The same float32 operations in the same order as _compute_llama3_parameters.
  const double old_context = double(r.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / r.low_freq_factor;
  const double high_freq_wavelen = old_context / r.high_freq_factor;
  const torch::Tensor wavelen = (2 * M_PI) / inv_freq;
  const torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
  const torch::Tensor smooth = (old_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const torch::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  const torch::Tensor medium =
      (wavelen < high_freq_wavelen).logical_not().logical_and((wavelen > low_freq_wavelen).logical_not());
  return torch::where(medium, smoothed, scaled);
}

}  // namespace turnrl
