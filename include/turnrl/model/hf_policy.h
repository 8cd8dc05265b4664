#pragma once
// HFPolicy: a HuggingFace checkpoint folder as a turnrl Policy. load_hf_policy reads config.json
// and the safetensors weights (hf_decoder.h), optionally adds LoRA adapters, and the policy
// trains, samples (KV cache) and writes back in the formats transformers and peft read:
//
//   auto policy = turnrl::load_hf_policy(turnrl::HFModelOptions()
//                     .path("/models/Qwen3-8B-Base").dtype(torch::kBFloat16).device(torch::kCUDA)
//                     .lora(turnrl::LoraOptions().rank(64).alpha(128)));
//   ... train ...
//   policy->save_pretrained("out/qwen3-8b-kernels", turnrl::SavePretrainedOptions()
//                               .copy_files_from("/models/Qwen3-8B-Base"));  // + tokenizer files
//
// Config keys (YAML `model:` section): type: hf, path, dtype, logp_chunk_size,
// activation_checkpointing, lora.{rank, alpha, rslora, target_modules}.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/types.h>

#include "turnrl/model/generation_engine.h"
#include "turnrl/model/hf_decoder.h"
#include "turnrl/model/lora.h"
#include "turnrl/model/policy.h"

namespace turnrl {

struct HFModelOptions {
  TORCH_ARG(std::string, path) = "";                   // checkpoint folder (config.json + safetensors)
  TORCH_ARG(torch::Dtype, dtype) = torch::kBFloat16;   // parameters' dtype; kFloat, kBFloat16 or kHalf
  TORCH_ARG(torch::Device, device) = torch::kCPU;
  TORCH_ARG(LoraOptions, lora) = LoraOptions();        // rank 0 = full fine-tuning
  // The folder whose tokenizer files every folder save() writes carries; "" = path.
  TORCH_ARG(std::string, tokenizer_dir) = "";
  // Training memory (verl's names in brackets): forward_logp's positions per chunk of the
  // vocabulary projection and log-softmax (chunked_logp.h; the logits of one chunk, float32, are
  // the largest tensor), and re-running each layer in the backward pass
  // (enable_gradient_checkpointing; hf_decoder.h).
  TORCH_ARG(int64_t, logp_chunk_size) = 1024;
  TORCH_ARG(bool, activation_checkpointing) = false;
  // Fused GPU kernels in the trainer's forward and backward (hf_decoder.h, set_fused_kernels).
  TORCH_ARG(bool, fused_kernels) = true;
};

// Throws turnrl::Error naming the field (model.path, model.dtype, model.logp_chunk_size, model.lora.*).
void validate(const HFModelOptions& options);
// "bfloat16" | "float16" | "float32" (and transformers' short names "bf16", "fp16", "fp32")
// -> dtype; anything else is an error naming model.dtype.
torch::Dtype hf_dtype_from_name(const std::string& name);
// The name config.json uses for a dtype ("bfloat16", "float16", "float32").
std::string hf_dtype_name(torch::Dtype dtype);

struct SavePretrainedOptions {
  // Larger checkpoints are split into shards with an index (save_pretrained's max_shard_size).
  TORCH_ARG(int64_t, max_shard_bytes) = int64_t(5) << 30;
  // A folder whose tokenizer and generation files (tokenizer.json, tokenizer_config.json,
  // special_tokens_map.json, vocab.json, merges.txt, added_tokens.json, chat_template.jinja,
  // generation_config.json) are copied next to the weights, where present. "" = none.
  TORCH_ARG(std::string, copy_files_from) = "";
};

class HFPolicy : public Policy {
 public:
  // `source`: the folder the base weights came from (adapter_config.json's base_model_name_or_path).
  // `tokenizer_dir`: a folder whose tokenizer files save() copies next to the weights ("" = none).
  explicit HFPolicy(HFDecoder model, std::string source = "", std::string tokenizer_dir = "")
      : model_(std::move(model)), source_(std::move(source)), tokenizer_dir_(std::move(tokenizer_dir)) {}

  TokenLogp forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask = {},
                         const torch::Tensor& response_mask = {}) override;
  // Sampling runs on a GenerationEngine (generation_engine.h) the policy keeps between calls;
  // options.use_cache = false re-runs the whole sequence every step instead (the reference).
  // Row b draws its own stream (sampler.h: row_keys), so the rollout equals sample()'s.
  Rollout generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                   const SamplingOptions& options) override;
  // generate() with each episode's sequence kept in the engine between turns: a turn prefills only
  // the tokens its prompt adds to the previous turn's.
  Rollout generate_turn(const torch::Tensor& prompts, const torch::Tensor& prompt_mask, const SamplingOptions& options,
                        const std::vector<int64_t>& episodes) override;
  void end_episodes() override;
  // The engine's slots and capacity. Left at 0 (the default) they follow the calls: slots = the
  // largest batch seen, capacity = the longest prompt + max_new_tokens seen, rounded up to a power
  // of two (at least 256); a call that does not fit rebuilds the engine.
  void engine_options(const GenerationEngineOptions& options);
  // The engine of the last call (null before the first); for its statistics.
  const GenerationEngine* engine() const { return engine_.get(); }
  // The trainable parameters: the adapters with LoRA, every parameter without.
  std::vector<torch::Tensor> parameters() override;
  // A checkpoint folder the policy resumes from, with the tokenizer files: with LoRA the adapters
  // (peft layout: adapter_config.json + adapter_model.safetensors), without it the whole model
  // (save_pretrained layout, which load_hf_policy and transformers load).
  void save(const std::string& folder) override;
  // Reads what save() wrote into the existing parameters (dtype and device kept).
  void load(const std::string& folder) override;
  bool saves_folder() const override { return true; }
  // Training mode drops the engine: its cache memory goes back to the allocator for the training
  // step (RolloutCollector switches to eval mode for a rollout and back after it).
  void train(bool on = true) override {
    if (on) {
      engine_.reset();
      episode_request_.clear();
    }
    model_->train(on);
  }
  void to(torch::Device device) override {
    engine_.reset();
    model_->to(device);
  }
  // The base weights take `dtype`; LoRA adapters stay float32.
  void to(torch::Dtype dtype) override;
  torch::Device device() const override { return model_->device(); }

  // A plain checkpoint (adapters merged) that transformers' from_pretrained, vLLM and SGLang load:
  // config.json, model.safetensors (or shards + index), metadata {"format": "pt"}.
  void save_pretrained(const std::string& folder, const SavePretrainedOptions& options = {}) const;
  // peft's layout: adapter_config.json + adapter_model.safetensors. Needs adapters.
  void save_adapter(const std::string& folder) const;
  // Adapters written by save_adapter (or by peft, same rank and targets) into the existing ones.
  void load_adapter(const std::string& folder);

  // Positions per chunk of forward_logp's vocabulary projection (>= 1; HFModelOptions).
  void set_logp_chunk_size(int64_t rows);
  int64_t logp_chunk_size() const { return logp_chunk_size_; }

  HFDecoder& model() { return model_; }
  const HFConfig& config() const { return model_->config(); }

 private:
  Rollout run_engine(const torch::Tensor& prompts, const torch::Tensor& prompt_mask, const SamplingOptions& options,
                     const std::vector<int64_t>* episodes);

  HFDecoder model_;
  std::string source_, tokenizer_dir_;
  GenerationEngineOptions engine_options_ = GenerationEngineOptions().slots(0).capacity(0);
  std::unique_ptr<GenerationEngine> engine_;
  std::map<int64_t, int64_t> episode_request_;  // episode -> its last kept engine request
  int64_t logp_chunk_size_ = HFModelOptions().logp_chunk_size();
};

// Reads options.path (config.json + model.safetensors or a sharded index) into a policy of
// options.dtype on options.device, with adapters when options.lora().rank() > 0.
std::unique_ptr<HFPolicy> load_hf_policy(const HFModelOptions& options);

}  // namespace turnrl
