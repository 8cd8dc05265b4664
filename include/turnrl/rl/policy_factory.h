#pragma once
// The policy a config's `model:` section names (model_config.h), for every command that trains or
// runs one (`turnrl train`, `turnrl sft`, `turnrl eval`):
//   type: builtin  a fresh (or model.init) TransformerPolicy over the byte chat tokenizer
//   type: hf       load_hf_policy(model.path) over load_chat_tokenizer(model.tokenizer or model.path):
//                  the checkpoint's BPE tokenizer and chat template
//
//   ChatPolicy p = turnrl::make_chat_policy(config.model, /*seed=*/1, torch::kCPU);
//   ChatCodec codec(p.tokenizer, max_new_tokens);   // the policy's conversations, token-in/token-out
#include <cstdint>
#include <memory>

#include <torch/types.h>

#include "turnrl/model/chat_tokenizer.h"
#include "turnrl/model/policy.h"
#include "turnrl/model/transformer.h"
#include "turnrl/rl/model_config.h"

namespace turnrl {

struct ChatPolicy {
  std::shared_ptr<Policy> policy;
  std::shared_ptr<const ChatTokenizer> tokenizer;
  int64_t max_seq = 0;  // longest sequence (prompt and responses) the policy takes
};

// Builds the policy on `device`. `seed` seeds the global generator first, so fresh builtin weights
// and fresh LoRA adapters are reproducible. Throws turnrl::Error naming the model.* key for a
// folder that does not load, a tokenizer whose ids do not fit the model's vocabulary, a dtype the
// device cannot run.
ChatPolicy make_chat_policy(const ModelConfig& model, uint64_t seed, torch::Device device);

// The builtin TransformerPolicy of model.* with `vocab` embedding rows and `max_seq` positions
// (fresh from the global generator, or model.init's weights). make_chat_policy uses it, and so does
// the kernel recipe's plan policy.
std::unique_ptr<TransformerPolicy> make_builtin_policy(const ModelConfig& model, int64_t vocab, int64_t max_seq,
                                                       torch::Device device);

// model.dtype for `device`: auto is float32 on the CPU and bfloat16 on GPUs.
torch::Dtype model_dtype(const ModelConfig& model, torch::Device device);

}  // namespace turnrl
