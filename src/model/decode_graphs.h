#pragma once
// CUDA graphs of the generation engine's decode steps (generation_engine.cpp): one graph per key
// (the batch-size bucket, the read-width bucket and what the step computes), captured on a side
// stream the first time the key runs, then replayed with the step's inputs copied into the graph's
// static buffers. Compiled only with CUDA.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <torch/types.h>

namespace turnrl::detail {

// A step of fixed-shape input tensors to one output tensor. Must not read tensors on the host
// (it is captured).
using DecodeStep = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;

class DecodeGraphs {
 public:
  DecodeGraphs();
  ~DecodeGraphs();
  // The output of `step` for `inputs`, replayed on device `on` from the graph captured for `key`
  // (captured from `step` on the key's first call; later calls must pass inputs of the same shapes
  // and dtypes, on `on` or in host memory, best pinned): a static buffer, valid until the key's
  // next call.
  torch::Tensor run(const std::vector<int64_t>& key, const std::vector<torch::Tensor>& inputs, torch::Device on,
                    const DecodeStep& step);

 private:
  struct Graph;
  std::map<std::vector<int64_t>, std::unique_ptr<Graph>> graphs_;
};

}  // namespace turnrl::detail
