#pragma once
// Rotary position embeddings (RoPE) as transformers computes them (modeling_rope_utils): the
// inverse frequencies of each rotated pair, plain (`default`) or rescaled for long context
// (`llama3`, Llama-3.1 and later). The rotation itself is the `rotate_half` layout: pair
// (x_i, x_{i + head_dim/2}) turns by position * inv_freq[i].
#include <cstdint>
#include <string>

#include <torch/types.h>

namespace turnrl {

struct RopeSettings {
  std::string type = "default";  // "default" or "llama3"
  double theta = 10000.0;
  // llama3 only (_compute_llama3_parameters): wavelengths longer than
  // original_max_position_embeddings / low_freq_factor are slowed down by `factor`, those shorter
  // than original_max_position_embeddings / high_freq_factor kept, the band between interpolated.
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// float32 [head_dim / 2] on the CPU: 1 / theta^(2i / head_dim) in float32 (as transformers does,
// not 2^-x in double), then the llama3 rescaling when `settings.type` is "llama3".
torch::Tensor rope_inverse_frequencies(const RopeSettings& settings, int64_t head_dim);

}  // namespace turnrl
