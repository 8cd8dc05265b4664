#pragma once
// KVCache: keys and values of every layer of a decoder for incremental decoding (the sampler's
// prefill / extend), preallocated to a capacity. Rows are left-padded prompts followed by one
// token per step; key_mask marks which cached columns hold a real token of their row.
#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace turnrl {

struct KVCache {
  std::vector<torch::Tensor> keys, values;  // per layer [B, kv_heads, capacity, head_dim]
  torch::Tensor key_mask;                   // bool  [B, capacity] valid cached tokens
  torch::Tensor valid_count;                // int64 [B] valid tokens so far (next position)
  int64_t length = 0;                       // columns filled

  // An empty cache; `like` gives the dtype and device of keys and values.
  static KVCache empty(int64_t layers, int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                       const torch::TensorOptions& like);
  int64_t capacity() const { return key_mask.size(1); }
};

}  // namespace turnrl
