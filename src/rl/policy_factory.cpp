#include "turnrl/rl/policy_factory.h"

#include <algorithm>

#include <torch/utils.h>

#include "turnrl/core/error.h"
#include "turnrl/model/hf_policy.h"
#include "turnrl/model/hf_tokenizer.h"

namespace turnrl {

torch::Dtype model_dtype(const ModelConfig& model, torch::Device device) {
  if (model.dtype == "auto") return device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  return hf_dtype_from_name(model.dtype);
}

std::unique_ptr<TransformerPolicy> make_builtin_policy(const ModelConfig& model, int64_t vocab, int64_t max_seq,
                                                       torch::Device device) {
  TransformerOptions options;
  options.vocab(vocab).d_model(model.d_model).layers(model.layers).heads(model.heads).ffn(model.ffn).max_seq(max_seq);
  validate(options);
  auto policy = std::make_unique<TransformerPolicy>(options, device);
  if (!model.init.empty()) policy->load(model.init);
  return policy;
}

namespace {

ChatPolicy make_hf_policy(const ModelConfig& model, torch::Device device) {
  const LoraOptions lora =
      LoraOptions().rank(model.lora.rank).alpha(model.lora.alpha).rslora(model.lora.rslora).target_modules(model.lora.target_modules);
  const std::string tokenizer_dir = model.tokenizer.empty() ? model.path : model.tokenizer;
  std::shared_ptr<HFPolicy> policy = load_hf_policy(
      HFModelOptions()
                                                     .path(model.path)
                                                     .dtype(model_dtype(model, device))
                                                     .device(device)
                                                     .lora(lora)
                                                     .tokenizer_dir(tokenizer_dir)
                                                     .logp_chunk_size(model.logp_chunk_size)
                                                     .activation_checkpointing(model.activation_checkpointing)
                                                     .fused_kernels(model.fused_kernels));
  policy->engine_options(GenerationEngineOptions()
                             .slots(model.engine.slots)
                             .capacity(model.engine.capacity)
                             .prefill_tokens(model.engine.prefill_tokens)
                             .cuda_graphs(model.engine.cuda_graphs)
                             .fused_kernels(model.engine.fused_kernels)
                             .merged_projections(model.engine.merged_projections)
                             .decode_attention(model.engine.decode_attention == "flash" ? DecodeAttention::flash
                                                                                         : DecodeAttention::split_kv)
                             .overlap_steps(model.engine.overlap_steps)
                             .kv_cache_dtype(model.engine.kv_cache_dtype == "fp8_e4m3" ? KVCacheDtype::fp8_e4m3
                                                                                        : KVCacheDtype::model)
                             .share_prefixes(model.engine.share_prefixes));
  std::shared_ptr<const ChatTokenizer> tokenizer = load_chat_tokenizer(tokenizer_dir);
  const HFConfig& config = policy->config();
  // Qwen3's embedding has more rows (151,936) than the tokenizer has ids (151,669): padding rows
  // are fine, an id past the last row is not.
  if (tokenizer->vocab_size() > config.vocab_size)
    fail("model.{}: the tokenizer in '{}' has {} ids but the model in '{}' has vocab_size {}; allowed: a tokenizer "
         "whose ids fit the model",
         model.tokenizer.empty() ? "path" : "tokenizer", tokenizer_dir, tokenizer->vocab_size(), model.path,
         config.vocab_size);
  const int64_t own = config.max_position_embeddings > 0 ? config.max_position_embeddings : model.max_seq;
  const int64_t max_seq = model.max_seq > 0 ? std::min(model.max_seq, own) : own;
  if (max_seq <= 0)
    fail("model.max_seq: 0, and '{}/config.json' has no max_position_embeddings; set model.max_seq", model.path);
  return {std::move(policy), std::move(tokenizer), max_seq};
}

}  // namespace

ChatPolicy make_chat_policy(const ModelConfig& model, uint64_t seed, torch::Device device) {
  check_model_config(model);
  torch::manual_seed(seed);
  if (model.type == "hf") return make_hf_policy(model, device);
  auto tokenizer = std::make_shared<const ByteChatTokenizer>();
  const int64_t max_seq = builtin_max_seq(model);
  return {make_builtin_policy(model, tokenizer->vocab_size(), max_seq, device), tokenizer, max_seq};
}

}  // namespace turnrl
