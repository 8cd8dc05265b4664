#pragma once
// ModelConfig: the `model:` section of a training config, shared by `turnrl train` and
// `turnrl sft`. Two kinds of policy (policy_factory.h builds them):
//   type: builtin  turnrl's small decoder (TransformerPolicy) over the byte tokenizer
//   type: hf       a HuggingFace checkpoint folder (HFPolicy) over its own BPE tokenizer and chat
//                  template, optionally with LoRA adapters
// describe() names every key once with its range and help text; the config reader, the resolved
// config.yaml, `turnrl config --print-defaults` and docs/configuration.md all come from it.
#include <cstdint>
#include <string>
#include <vector>

namespace turnrl {

// model.lora: adapters on an hf policy (model/lora.h); rank 0 trains every parameter.
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 16.0;
  bool rslora = false;  // scale alpha / sqrt(rank) instead of alpha / rank
  std::vector<std::string> target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
};

// model.engine: the generation engine an hf policy samples on (model/generation_engine.h). Slots
// and capacity at 0 follow the calls: as many slots as a call has rows, and room for its longest
// prompt plus max_new_tokens rounded up to a power of two (>= 256); a larger call rebuilds the
// engine. Set them to allocate the KV cache once (vLLM's max_num_seqs and max_model_len).
struct GenerationEngineConfig {
  int64_t slots = 0;
  int64_t capacity = 0;
  int64_t prefill_tokens = 16384;
  bool cuda_graphs = true;
  bool fused_kernels = true;
  bool merged_projections = true;
  std::string decode_attention = "split_kv";  // split_kv | flash (kv_cache.h's DecodeAttention)
  bool overlap_steps = true;
  std::string kv_cache_dtype = "auto";  // auto (the model's dtype) | fp8_e4m3 (kv_cache.h's KVCacheDtype)
  bool share_prefixes = true;
};

struct ModelConfig {
  std::string type = "builtin";  // builtin | hf
  std::string device = "cpu";    // cpu | cuda
  // Longest sequence. 0 = the model's own: 64 for builtin, config.json's max_position_embeddings
  // for hf (a smaller value caps it there).
  int64_t max_seq = 0;
  // builtin: the TransformerPolicy's shape, and a model file (TransformerPolicy::save) to start from.
  int64_t d_model = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t ffn = 0;  // 0 = 8/3 d_model rounded up to 64
  std::string init;
  // hf: the checkpoint folder (config.json + safetensors + tokenizer files), the parameters'
  // dtype, the tokenizer folder ("" = path) and the adapters.
  std::string path;
  std::string dtype = "auto";  // auto (float32 on cpu, bfloat16 on cuda) | float32 | bfloat16 | float16
  std::string tokenizer;
  // hf: training memory (hf_policy.h): positions per chunk of the log-prob computation over the
  // vocabulary, and re-running each decoder layer in the backward pass.
  int64_t logp_chunk_size = 1024;
  bool activation_checkpointing = false;
  bool fused_kernels = true;
  LoraConfig lora;
  GenerationEngineConfig engine;
};

// The builtin policy's context when max_seq is 0.
constexpr int64_t kBuiltinDefaultMaxSeq = 64;

template <typename V>
void describe(V& v, LoraConfig& o) {
  v.integer("rank", o.rank, 0, 1 << 16, "adapter rank; 0 = no adapters (full fine-tuning)");
  v.number("alpha", o.alpha, 1e-6, 1e6, "scale alpha / rank; > 0");
  v.flag("rslora", o.rslora, "rsLoRA: scale alpha / sqrt(rank)");
  v.texts("target_modules", o.target_modules, "projections with an adapter (q_proj k_proj v_proj o_proj gate_proj up_proj down_proj)");
}

template <typename V>
void describe(V& v, GenerationEngineConfig& o) {
  v.integer("slots", o.slots, 0, 1 << 20, "sequences decoded together (KV cache rows); 0 = a call's rows");
  v.integer("capacity", o.capacity, 0, 1 << 24,
            "tokens one slot holds (prompt + response, later turns when kept); 0 = a call's need, rounded up to a power "
            "of two >= 256; else >= 2");
  v.integer("prefill_tokens", o.prefill_tokens, 1, int64_t(1) << 30,
            "new tokens per batched prefill (one request is always admitted); >= 1");
  v.flag("cuda_graphs", o.cuda_graphs, "capture decode steps as CUDA graphs on a CUDA device (false: eager)");
  v.flag("fused_kernels", o.fused_kernels,
         "fused GPU kernels for norms, rotary embedding, the gated MLP and attention, and sampling inside the decode "
         "graphs (false: plain LibTorch ops)");
  v.flag("merged_projections", o.merged_projections,
         "with fused_kernels: q/k/v and gate/up through one GEMM each, from merged copies of their weights (which "
         "cost that memory once more; false: one GEMM each)");
  v.choice("decode_attention", o.decode_attention, {"split_kv", "flash"},
           "with fused_kernels: a decode step's attention, split_kv (turnrl's kernel: a row's keys over several blocks) "
           "| flash (FlashAttention's variable-length forward)");
  v.flag("overlap_steps", o.overlap_steps,
         "launch each decode step before the previous one's tokens reach the host (on cuda with fused_kernels, the "
         "host's work overlaps the GPU's; same tokens)");
  v.choice("kv_cache_dtype", o.kv_cache_dtype, {"auto", "fp8_e4m3"},
           "auto (keys and values in the model's dtype) | fp8_e4m3 (8-bit codes, scale 1: half the cache's memory "
           "and of a decode step's reads of it, each key and value rounded once more)");
  v.flag("share_prefixes", o.share_prefixes,
         "a request copies the keys and values of the longest prefix (>= 16 tokens) another slot has cached and "
         "prefills the rest; the n samples of one prompt prefill it once");
}

template <typename V>
void describe(V& v, ModelConfig& o) {
  v.choice("type", o.type, {"builtin", "hf"}, "builtin (TransformerPolicy, byte tokenizer) | hf (a HuggingFace folder)");
  v.choice("device", o.device, {"cpu", "cuda"}, "cpu | cuda");
  v.integer("max_seq", o.max_seq, 0, 1 << 24, "longest sequence; 0 = builtin 64, hf max_position_embeddings; else >= 16");
  v.integer("d_model", o.d_model, 2, 1 << 16, "builtin: residual width; d_model / heads must be even");
  v.integer("layers", o.layers, 1, 1024, "builtin: decoder blocks");
  v.integer("heads", o.heads, 1, 1024, "builtin: attention heads");
  v.integer("ffn", o.ffn, 0, 1 << 20, "builtin: SwiGLU width; 0 = 8/3 d_model rounded up to 64");
  v.text("init", o.init, "builtin: model file to start from; \"\" = fresh weights");
  v.text("path", o.path, "hf: checkpoint folder (config.json, safetensors, tokenizer files; turnrl init-model)");
  v.choice("dtype", o.dtype, {"auto", "float32", "bfloat16", "float16"}, "hf: auto (float32 on cpu, bfloat16 on cuda) | float32 | bfloat16 | float16");
  v.text("tokenizer", o.tokenizer, "hf: tokenizer folder (tokenizer.json, tokenizer_config.json); \"\" = path");
  v.integer("logp_chunk_size", o.logp_chunk_size, 1, int64_t(1) << 30,
            "hf: positions per chunk of the log-prob/entropy computation (float32 logits of one chunk at a time); >= 1");
  v.flag("activation_checkpointing", o.activation_checkpointing,
         "hf: re-run each decoder layer in the backward pass instead of keeping its activations (verl's "
         "enable_gradient_checkpointing)");
  v.flag("fused_kernels", o.fused_kernels,
         "hf on cuda: fused kernels (with their own backward) for norms, rotary embedding, the gated MLP and the "
         "chunked log-probs in the trainer's forward and backward (Liger-style)");
  v.section("lora", o.lora, "hf: LoRA adapters (peft names)");
  v.section("engine", o.engine, "hf: the generation engine's sizes");
}

// Checks across the section's keys (after reading); `section` is the key path of the section
// ("model"), so messages name e.g. model.path. Throws turnrl::Error.
void check_model_config(const ModelConfig& model, const std::string& section = "model");

class ConfigReader;
class ConfigWriter;
// The section read strictly (then check_model_config) and written back, from describe().
void read_options(ConfigReader& reader, ModelConfig& model);
void write_options(ConfigWriter& writer, const ModelConfig& model);
// The comment over the `model:` section of every config file.
inline constexpr const char* kModelSectionHelp =
    "The policy: builtin (small decoder, byte tokenizer) or hf (a HuggingFace folder).";

// The context length the builtin policy gets (max_seq, or kBuiltinDefaultMaxSeq when it is 0).
int64_t builtin_max_seq(const ModelConfig& model);

}  // namespace turnrl
