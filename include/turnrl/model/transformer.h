#pragma once
// TransformerPolicy: the built-in decoder-only transformer (LLaMA-style: RMSNorm before each
// sub-layer, rotary positions, SwiGLU MLP, causal multi-head attention, untied output head) and
// its KV-cache sampler. Attention uses at::scaled_dot_product_attention where LibTorch has it
// (2.0+), an equivalent plain implementation otherwise. Parameters are fp32 or bf16; log-probs are
// always computed in fp32.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "turnrl/model/kv_cache.h"
#include "turnrl/model/policy.h"

namespace turnrl {

struct TransformerOptions {
  TORCH_ARG(int64_t, vocab) = 263;      // embedding rows (Tokenizer::vocab_size())
  TORCH_ARG(int64_t, d_model) = 128;    // residual width
  TORCH_ARG(int64_t, layers) = 2;       // decoder blocks
  TORCH_ARG(int64_t, heads) = 4;        // attention heads; d_model / heads must be even (rotary)
  TORCH_ARG(int64_t, ffn) = 0;          // SwiGLU hidden width; 0 = 8/3 d_model rounded up to 64
  TORCH_ARG(int64_t, max_seq) = 2048;   // longest sequence (prompt + generation) accepted
  TORCH_ARG(double, rope_theta) = 10000.0;
  TORCH_ARG(double, norm_eps) = 1e-5;
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat;  // kFloat or kBFloat16

 public:

  int64_t ffn_width() const { return ffn_ > 0 ? ffn_ : (8 * d_model_ / 3 + 63) / 64 * 64; }
  int64_t head_dim() const { return d_model_ / heads_; }
  // Parameter count: embedding + blocks + final norm + output head.
  int64_t num_parameters() const;
  // Matmul FLOPs of one forward pass per token (2 per multiply-add) when the token attends to
  // `attended` keys on average: (T+1)/2 for a causal pass over T tokens, the cache length when
  // decoding. Training (forward + backward) is 3x this.
  double forward_flops_per_token(double attended) const;
};

// Throws turnrl::Error naming the field when an option is out of range.
void validate(const TransformerOptions& options);

namespace detail {
class DecoderBlock;
}

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const TransformerOptions& options);

  // tokens int64 [B, T], attention_mask bool [B, T] (undefined = all valid) -> logits [B, T, vocab]
  // in the parameters' dtype; position t predicts token t+1. With a cache, the tokens are
  // appended to it and attend to everything cached before them.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& attention_mask = {},
                        KVCache* cache = nullptr);
  // An empty cache for `batch` rows and up to `capacity` tokens, on the parameters' device/dtype.
  KVCache make_cache(int64_t batch, int64_t capacity) const;

  const TransformerOptions& options() const { return options_; }

  // Conversions keep options().dtype() in step with the parameters.
  using torch::nn::Module::to;
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;

 private:
  TransformerOptions options_;
  torch::Tensor inv_freq_;  // rotary inverse frequencies, float32 [head_dim / 2] on the CPU
  torch::nn::Embedding embed_{nullptr};
  std::vector<std::shared_ptr<detail::DecoderBlock>> blocks_;
  torch::Tensor final_norm_;
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Transformer);

class TransformerPolicy : public Policy {
 public:
  // Fresh parameters (normal(0, 0.02); output projections scaled by 1/sqrt(2 layers)) drawn from
  // the global generator: call torch::manual_seed first for reproducible weights.
  explicit TransformerPolicy(const TransformerOptions& options, torch::Device device = torch::kCPU);
  // A policy with the options and weights stored by save(), in its saved dtype.
  static std::unique_ptr<TransformerPolicy> from_file(const std::string& path, torch::Device device = torch::kCPU);

  TokenLogp forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask = {},
                         const torch::Tensor& response_mask = {}) override;
  Rollout generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                   const SamplingOptions& options) override;
  std::vector<torch::Tensor> parameters() override { return model_->parameters(); }
  // Options and weights in one LibTorch archive.
  void save(const std::string& path) override;
  // Weights from save(); throws when the stored options differ in shape. Keeps this policy's
  // device and dtype (an fp32 checkpoint loads into a bf16 rollout copy).
  void load(const std::string& path) override;
  void train(bool on = true) override { model_->train(on); }
  void to(torch::Device device) override;
  void to(torch::Dtype dtype) override;
  torch::Device device() const override { return device_; }

  Transformer& model() { return model_; }
  const TransformerOptions& options() const { return model_->options(); }

 private:
  Transformer model_;
  torch::Device device_;
};

}  // namespace turnrl
