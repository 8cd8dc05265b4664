#pragma once
// HFDecoder: one decoder-only transformer for the HuggingFace families of hf_config.h (Qwen2 /
// Qwen2.5, Qwen3, Llama-3.x), configured by their config.json and computing what transformers'
// modeling_qwen2 / modeling_qwen3 / modeling_llama compute:
//   embed_tokens -> per layer: x + o_proj(attn(input_layernorm(x))), x + down(silu(gate(h)) * up(h))
//   with h = post_attention_layernorm(x) -> norm -> lm_head (or the embedding when tied).
// RMSNorm in float32 then cast back before the weight; q/k (+ Qwen3's per-head q_norm/k_norm) rotated
// with rotate_half and cos/sin from float32 cast to the model dtype; attention scale
// head_dim^-0.5 with grouped key/value heads (SDPA, with enable_gqa on LibTorch >= 2.5).
// Parameter names are transformers' (model.layers.0.self_attn.q_proj.weight, ...), so loading and
// saving are a walk over named_parameters().
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "turnrl/model/hf_config.h"
#include "turnrl/model/kv_cache.h"
#include "turnrl/model/lora.h"
#include "turnrl/model/safetensors.h"

namespace turnrl {

namespace detail {
struct HFLayer;
}

class HFDecoderImpl : public torch::nn::Module {
 public:
  // Parameters allocated, uninitialised, with `options` (device and dtype): load_weights fills them.
  HFDecoderImpl(const HFConfig& config, const torch::TensorOptions& options);
  ~HFDecoderImpl() override;

  // tokens int64 [B, T], attention_mask bool [B, T] (undefined = all valid) -> logits
  // [B, T, vocab] in the model dtype (position t predicts token t+1), or [B, 1, vocab] for the
  // last position only. Positions count from each row's first valid token. With a cache the tokens
  // are appended to it and attend to everything cached before them.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& attention_mask = {},
                        KVCache* cache = nullptr, bool last_position_only = false);
  // forward's two halves: the final-normed hidden states [B, T, hidden] and the vocabulary
  // projection of any [..., hidden] rows. Scoring only some positions (HFPolicy::forward_logp with a
  // response mask) projects only those: on a 151,936-entry vocabulary that is most of the cost.
  torch::Tensor final_hidden(const torch::Tensor& tokens, const torch::Tensor& attention_mask = {},
                             KVCache* cache = nullptr);
  torch::Tensor logits(const torch::Tensor& hidden) const;
  // The vocabulary projection's weight [vocab, hidden] (the embedding when tied): logits(h) = h · Wᵀ.
  const torch::Tensor& lm_head_weight() const { return lm_head_; }
  KVCache make_cache(int64_t batch, int64_t capacity) const;
  // The generation engine's forward (generation_engine.h): tokens int64 [B, T] placed in `cache`
  // where `batch` says (kv_cache.h), each attending to its slot's earlier tokens; returns the
  // final-normed hidden states [B, T, hidden] (padding tokens' rows are meaningless). Reads no
  // tensor on the host, so a CUDA graph can capture it.
  torch::Tensor slot_hidden(const torch::Tensor& tokens, const SlotBatch& batch, SlotKVCache& cache);
  SlotKVCache make_slot_cache(int64_t slots, int64_t capacity, KVCacheDtype storage = KVCacheDtype::model) const;
  // The merged projections of slot_hidden() calls whose batch asks for them
  // (SlotBatch::merged_projections): per layer, the q/k/v weights and the gate/up weights stacked
  // into one GEMM each (vLLM's QKV and gate/up merging) and, for the fused decode path on a GPU, an
  // o_proj whose input columns come in the order the attention kernel writes its heads. They are
  // copies, costing those weights' memory once more (about 1.9 GB for Qwen3-1.7B in bf16),
  // refreshed in place when a parameter changed through a tensor op (its version counter) or was
  // replaced; a projection with a LoRA adapter keeps its own GEMM. slot_hidden() refreshes them
  // outside CUDA graph replays; GenerationEngine::run() calls this before it replays any.
  void refresh_merged_projections();
  // Frees the copies (the next slot_hidden() call that asks for them builds them again).
  void clear_merged_projections();
  // How many times a merged copy was allocated or freed (a refresh in place does not count): CUDA
  // graphs captured while it had another value read memory the copies no longer own.
  int64_t merged_placements() const;

  // Activation checkpointing (verl's enable_gradient_checkpointing): when on, a differentiable
  // forward without a cache keeps only each layer's input and re-runs the layer in the backward
  // pass, so activation memory is one hidden state per layer plus one layer's intermediates.
  // Gradients are those of the plain path. Off by default.
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  bool activation_checkpointing() const { return activation_checkpointing_; }

  // Fused GPU kernels in forward calls without the engine's slots (training, forward_logp, the
  // sampler): RMSNorm, a head's norm with its rotary embedding and the SiLU-gated product, each one
  // kernel with its own backward (src/model/fused_decoder.h), rounding where the plain ops round;
  // HFPolicy::forward_logp's chunked log-probs take their one-pass kernels too (chunked_logp.h).
  // Only where the build has CUDA and the model is on a GPU. Off for a bare HFDecoder;
  // HFModelOptions::fused_kernels (model.fused_kernels) turns it on for a loaded policy.
  void set_fused_kernels(bool on);
  bool fused_kernels() const { return fused_kernels_; }

  // Copies every tensor of the checkpoint into the parameters (converting dtype, straight to their
  // device). Strict: a missing, extra or mis-shaped tensor is an error naming it and its file.
  // A tied lm_head.weight and rotary inv_freq buffers that older checkpoints carry are skipped.
  void load_weights(const SafetensorsCheckpoint& checkpoint);

  // Adds adapters to the projections options.target_modules() names and freezes every other
  // parameter.
  void add_lora(const LoraOptions& options);
  const LoraOptions& lora() const { return lora_; }
  // The model's tensors under transformers' names, adapters merged into their projections:
  // what save_pretrained writes.
  NamedTensors merged_state() const;
  // The adapters under peft's names (base_model.model.<module>.lora_A.weight, ...), float32.
  NamedTensors adapter_state() const;

  const HFConfig& config() const { return config_; }
  torch::Dtype dtype() const { return embed_tokens_.scalar_type(); }
  torch::Device device() const { return embed_tokens_.device(); }

 private:
  HFConfig config_;
  LoraOptions lora_;
  bool activation_checkpointing_ = false;
  bool fused_kernels_ = false;
  torch::Tensor inv_freq_;  // float32 [head_dim / 2], on the CPU
  torch::Tensor inv_freq_on_device_;  // its copy on the model's device: slot_hidden copies nothing from the host
  torch::Tensor embed_tokens_, final_norm_, lm_head_;
  std::vector<std::shared_ptr<detail::HFLayer>> layers_;
};
TORCH_MODULE(HFDecoder);

}  // namespace turnrl
