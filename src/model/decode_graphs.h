#pragma once
// CUDA graphs of the generation engine's decode step (generation_engine.cpp): one graph per
// batch-size bucket, captured on a side stream the first time the bucket runs, then replayed with
// the step's inputs copied into the graph's static buffers. Compiled only with CUDA.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include <torch/types.h>

namespace turnrl::detail {

// The decode step: tokens, start and count int64 [R] (R = the bucket) -> logits [R, V]. Must not
// read tensors on the host (it is captured).
using DecodeStep =
    std::function<torch::Tensor(const torch::Tensor& tokens, const torch::Tensor& start, const torch::Tensor& count)>;

class DecodeGraphs {
 public:
  explicit DecodeGraphs(DecodeStep step);
  ~DecodeGraphs();
  // logits [R, V] of the step for inputs of R rows (R a bucket): a static buffer, valid until the
  // next call.
  torch::Tensor run(const torch::Tensor& tokens, const torch::Tensor& start, const torch::Tensor& count);

 private:
  struct Graph;
  DecodeStep step_;
  std::map<int64_t, std::unique_ptr<Graph>> graphs_;
};

}  // namespace turnrl::detail
