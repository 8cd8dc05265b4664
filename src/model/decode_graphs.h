#pragma once
// CUDA graphs of the generation engine's decode step (generation_engine.cpp): one graph per
// (batch-size bucket, read-width bucket), captured on a side stream the first time the pair runs,
// then replayed with the step's inputs copied into the graph's static buffers. Compiled only with
// CUDA.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include <torch/types.h>

namespace turnrl::detail {

// The decode step: tokens, start and count int64 [R] (R = the batch bucket), reading the first
// `width` cached positions of each slot (the width bucket) -> logits [R, V]. Must not read
// tensors on the host (it is captured).
using DecodeStep = std::function<torch::Tensor(const torch::Tensor& tokens, const torch::Tensor& start,
                                                const torch::Tensor& count, int64_t width)>;

class DecodeGraphs {
 public:
  explicit DecodeGraphs(DecodeStep step);
  ~DecodeGraphs();
  // logits [R, V] of the step for inputs of R rows reading `width` positions (R and width
  // buckets): a static buffer, valid until the next call.
  torch::Tensor run(const torch::Tensor& tokens, const torch::Tensor& start, const torch::Tensor& count,
                    int64_t width);

 private:
  struct Graph;
  DecodeStep step_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Graph>> graphs_;  // (rows, width) -> graph
};

}  // namespace turnrl::detail
