#pragma once
// Fresh HuggingFace checkpoints: config.json of a named preset (real Qwen3, Qwen2.5 and Llama-3.2 shapes,
// and tiny ones that train on a CPU) and random weights drawn as transformers' _init_weights
// draws them, written with the tokenizer files into a folder that load_hf_policy, `model.path`
// and transformers' from_pretrained read. `turnrl init-model` is its command line:
//
//   std::string config = turnrl::hf_preset_config("qwen3-tiny", turnrl::hf_preset_vocab("qwen3-tiny", tokenizer->tokenizer()));
//   turnrl::write_random_hf_model("models/qwen3-tiny", config,
//                                 turnrl::RandomHFModelOptions().seed(1).tokenizer_dir(turnrl::hf_tokenizer_files("qwen3")));
#include <cstdint>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/types.h>

#include "turnrl/model/bpe_tokenizer.h"

namespace turnrl {

// qwen3-tiny (hidden 128, 4 layers, 4 heads, 2 KV heads, head_dim 32, intermediate 384, tied
// embeddings), qwen3-0.6b, qwen3-1.7b, qwen3-8b, qwen2.5-tiny (qwen3-tiny's shape with Qwen2's q/k/v
// biases and no q/k norms), qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, llama3-tiny, llama3.2-1b.
const std::vector<std::string>& hf_preset_names();
// The tokenizer family of a preset: "qwen3" (Qwen3 and Qwen2.5) or "llama3" (the folder
// hf_tokenizer_files finds).
std::string hf_preset_tokenizer(const std::string& preset);
// What config.json takes from the tokenizer: its size (the tiny presets' vocab_size) and the ids of
// its bos and eos tokens.
struct HfPresetVocab {
  int64_t size = 0;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 0;
};
// `tokenizer`'s size and the ids of the preset family's bos/eos tokens, looked up by name (qwen3:
// <|endoftext|> both, as Qwen3's and Qwen2.5's configs; llama3: <|begin_of_text|>, <|end_of_text|>),
// so that a trimmed tokenizer (vocab_trim.h) gets a config naming its own ids. Throws naming the
// token when the tokenizer lacks it.
HfPresetVocab hf_preset_vocab(const std::string& preset, const BpeTokenizer& tokenizer);
// config.json text of a preset. The real shapes keep their released vocabulary (151,936 for
// Qwen3: padding rows past the tokenizer's 151,669 ids); the tiny ones take `vocab.size`, so no
// embedding row goes unused. Throws naming the preset and the allowed names, or a bos/eos id
// outside the vocabulary.
std::string hf_preset_config(const std::string& preset, const HfPresetVocab& vocab);
// Sets one top-level config.json key from "key=value" (value read as JSON, else as a string);
// throws naming the assignment when it is malformed.
std::string set_hf_config_key(const std::string& config_json, const std::string& assignment);

// The real tokenizer folder of `family` (qwen3 | llama3) that scripts/setup.sh fetched into the
// source tree's .deps/hf-tokenizers/<family>; an install carries Qwen3's in
// share/turnrl/.deps/hf-tokenizers/ (found through core/install_paths.h). Throws naming the
// folders tried.
std::string hf_tokenizer_files(const std::string& family);

struct RandomHFModelOptions {
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat;  // of the written weights; kFloat, kBFloat16 or kHalf
  // A folder whose tokenizer files (tokenizer.json, tokenizer_config.json, ...) are copied next to
  // the weights; "" = none.
  TORCH_ARG(std::string, tokenizer_dir) = "";
};

// Writes `folder` (created; files replaced): config.json, model.safetensors (shards above 5 GiB)
// and the tokenizer files. Weights as transformers' PreTrainedModel._init_weights: linear and
// embedding weights normal(0, initializer_range) (config.json's, default 0.02), biases zero, RMSNorm
// weights one; drawn on the CPU from a generator seeded with options.seed. Returns the parameter
// count.
int64_t write_random_hf_model(const std::string& folder, const std::string& config_json,
                              const RandomHFModelOptions& options = {});

}  // namespace turnrl
