#pragma once
// Inference copies of linear layers merged into one (vLLM's merged QKV and gate/up projections):
// the weights of several layers stacked along their outputs, so that one GEMM computes all of
// them, optionally with the input columns reordered. The generation engine's decode steps run
// on them (hf_decoder.cpp): at rollout batch sizes a projection's GEMM is short, and fewer,
// larger ones use the memory bandwidth better.
#include <array>
#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "turnrl/model/lora.h"

namespace turnrl::detail {

class MergedLinear {
 public:
  // Makes the merged copy of `parts`, stacked in order (input columns in `column_order` when
  // defined: merged column c is the parts' column column_order[c]), or refreshes it when a part's
  // weight or bias changed since: another storage, or a write through a tensor op (its version
  // counter). A refresh copies into the same tensors, so that a captured CUDA graph reading them
  // sees the new values. A part with a LoRA adapter has no fixed weight: then the copy is dropped
  // and false returned; true when the copy is usable.
  bool refresh(const std::vector<const LoraLinearImpl*>& parts, const torch::Tensor& column_order = {});
  // Frees the copy.
  void clear();
  bool ready() const { return weight_.defined(); }
  const torch::Tensor& weight() const { return weight_; }
  const torch::Tensor& bias() const { return bias_; }  // undefined where no part has one
  // How many times the copy was allocated or freed: a CUDA graph captured reading it is stale
  // once this changed (GenerationEngine drops its graphs then).
  int64_t placements() const { return placements_; }
  // x W^T + b over the merged weight: the parts' outputs side by side in the last dimension.
  torch::Tensor operator()(const torch::Tensor& x) const;

 private:
  torch::Tensor weight_, bias_;
  std::vector<std::array<int64_t, 3>> seen_;  // each source tensor's impl, data address and version at the last copy
  int64_t placements_ = 0;
};

}  // namespace turnrl::detail
