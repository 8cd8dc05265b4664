#pragma once
// HFConfig: the fields of a HuggingFace `config.json` that the decoder (hf_decoder.h) needs, for
// the families it implements: Qwen2ForCausalLM (Qwen2, Qwen2.5), Qwen3ForCausalLM and
// LlamaForCausalLM (Llama-3, 3.1, 3.2). Both layouts of the rotary settings are read: transformers
// 4.x (`rope_theta`, `rope_scaling` with `rope_type` or the older `type`) and 5.x
// (`rope_parameters`). Anything the decoder would compute differently from transformers (another
// architecture, rope type, activation, an active sliding window, dropout) is a turnrl::Error naming
// the key, its value and what is supported; keys that do not change the forward pass are ignored.
#include <cstdint>
#include <string>
#include <vector>

#include "turnrl/model/rope.h"

namespace turnrl {

enum class HFFamily { qwen2, qwen3, llama };

struct HFConfig {
  std::string architecture;  // as written in `architectures`, e.g. "Qwen3ForCausalLM"
  HFFamily family = HFFamily::llama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // GQA; equals num_attention_heads when absent
  int64_t head_dim = 0;             // explicit in Qwen3; hidden_size / num_attention_heads otherwise
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeSettings rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v projections: always in Qwen2, `attention_bias` in Qwen3 and Llama
  bool o_bias = false;    // o_proj: `attention_bias` in Qwen3 and Llama, never in Qwen2
  bool mlp_bias = false;  // gate/up/down: `mlp_bias` in Llama
  bool qk_norm = false;   // Qwen3: RMSNorm over each head of q and k before the rotation
  std::string dtype;      // `dtype` (5.x) or `torch_dtype` (4.x); "" when absent
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1, pad_token_id = -1;  // -1 when absent
  std::string json;  // the file as read; save_pretrained writes it back with the dtype updated
};

// Parses config.json text; `source` names it in messages.
HFConfig parse_hf_config(const std::string& json_text, const std::string& source = "config.json");
// Reads <folder>/config.json (or the file itself when `path` is a file).
HFConfig read_hf_config(const std::string& path);
// config.json text for a checkpoint saved in `dtype` ("bfloat16", "float16", "float32"): the
// original keys with `torch_dtype` and `dtype` set.
std::string hf_config_json(const HFConfig& config, const std::string& dtype);

}  // namespace turnrl
