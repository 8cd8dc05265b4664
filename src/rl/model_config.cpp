#include "turnrl/rl/model_config.h"

#include <fmt/format.h>

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"
#include "turnrl/model/lora.h"

namespace turnrl {
namespace {

// A key set for the other type of policy is a mistake that would otherwise be ignored silently.
void refuse_key_of_other_type(bool set, const std::string& section, const char* key, const std::string& value,
                              const std::string& type) {
  if (set)
    fail("{}.{}: '{}' is set but {}.type is '{}', which does not read it; remove it or set {}.type: {}", section, key,
         value, section, type, section, type == "hf" ? "builtin" : "hf");
}

}  // namespace

void check_model_config(const ModelConfig& o, const std::string& section) {
  if (o.max_seq != 0 && o.max_seq < 16)
    fail("{}.max_seq: {} is too short; allowed: 0 (the model's own) or >= 16", section, o.max_seq);
  if (o.type == "builtin") {
    if (o.d_model % o.heads != 0 || (o.d_model / o.heads) % 2 != 0)
      fail("{}.heads: {} heads do not split d_model {} into even head widths (rotary positions); allowed: d_model / "
           "heads an even integer",
           section, o.heads, o.d_model);
    refuse_key_of_other_type(!o.path.empty(), section, "path", o.path, o.type);
    refuse_key_of_other_type(!o.tokenizer.empty(), section, "tokenizer", o.tokenizer, o.type);
    refuse_key_of_other_type(o.dtype != "auto" && o.dtype != "float32", section, "dtype", o.dtype, o.type);
    refuse_key_of_other_type(o.lora.rank != 0, section, "lora.rank", std::to_string(o.lora.rank), o.type);
    refuse_key_of_other_type(o.logp_chunk_size != ModelConfig().logp_chunk_size, section, "logp_chunk_size",
                             std::to_string(o.logp_chunk_size), o.type);
    refuse_key_of_other_type(o.activation_checkpointing, section, "activation_checkpointing", "true", o.type);
    refuse_key_of_other_type(o.engine.slots != 0, section, "engine.slots", std::to_string(o.engine.slots), o.type);
    refuse_key_of_other_type(o.engine.capacity != 0, section, "engine.capacity", std::to_string(o.engine.capacity), o.type);
    return;
  }
  if (o.path.empty())
    fail("{}.path: empty, but {}.type is 'hf'; name a HuggingFace model folder (config.json, model.safetensors, "
         "tokenizer.json), e.g. one `turnrl init-model --out DIR` writes",
         section, section);
  refuse_key_of_other_type(!o.init.empty(), section, "init", o.init, o.type);
  if (o.engine.capacity == 1)
    fail("{}.engine.capacity: 1 is too small; allowed: 0 (follow the calls) or >= 2 (a prompt token and a generated one)",
         section);
  try {
    validate(LoraOptions().rank(o.lora.rank).alpha(o.lora.alpha).rslora(o.lora.rslora).target_modules(o.lora.target_modules));
  } catch (const Error& e) {
    fail("{}.{}", section, e.what());  // validate names the key from lora. on
  }
}

int64_t builtin_max_seq(const ModelConfig& o) { return o.max_seq > 0 ? o.max_seq : kBuiltinDefaultMaxSeq; }

void read_options(ConfigReader& r, ModelConfig& o) {
  read_described(r, o);
  check_model_config(o, r.path());
}

void write_options(ConfigWriter& w, const ModelConfig& o) { write_described(w, o); }

}  // namespace turnrl
