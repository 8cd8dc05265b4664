#include "decode_graphs.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace turnrl::detail {

struct DecodeGraphs::Graph {
  at::cuda::CUDAGraph graph;
  torch::Tensor tokens, start, count, logits;  // static inputs and output
};

DecodeGraphs::DecodeGraphs(DecodeStep step) : step_(std::move(step)) {}
DecodeGraphs::~DecodeGraphs() = default;

torch::Tensor DecodeGraphs::run(const torch::Tensor& tokens, const torch::Tensor& start, const torch::Tensor& count,
                                int64_t width) {
  const std::pair<int64_t, int64_t> key{tokens.size(0), width};
  auto found = graphs_.find(key);
  if (found == graphs_.end()) {
    auto g = std::make_unique<Graph>();
    // Idle rows (count 0) write only to the cache's scratch row: warm-up and capture leave every
    // sequence untouched.
    g->tokens = torch::zeros_like(tokens);
    g->start = torch::zeros_like(start);
    g->count = torch::zeros_like(count);
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, tokens.device().index());
    c10::cuda::getCurrentCUDAStream(tokens.device().index()).synchronize();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      // Warm-up outside the capture: cuBLAS handles and workspaces, lazy kernel loading.
      for (int i = 0; i < 2; ++i) step_(g->tokens, g->start, g->count, width);
      // Each graph keeps its own memory pool (sharing one is safe only when graphs replay in
      // capture order, and buckets replay in any order).
      g->graph.capture_begin();
      g->logits = step_(g->tokens, g->start, g->count, width);
      g->graph.capture_end();
    }
    side.synchronize();
    found = graphs_.emplace(key, std::move(g)).first;
  }
  Graph& g = *found->second;
  g.tokens.copy_(tokens);
  g.start.copy_(start);
  g.count.copy_(count);
  g.graph.replay();
  return g.logits;
}

}  // namespace turnrl::detail
