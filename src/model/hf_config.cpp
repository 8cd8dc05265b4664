#include "turnrl/core/filesystem.h"
#include "turnrl/model/hf_config.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "turnrl/core/error.h"

namespace turnrl {

using nlohmann::json;

namespace {

const std::pair<const char*, HFFamily> kArchitectures[] = {
    {"Qwen2ForCausalLM", HFFamily::qwen2}, {"Qwen3ForCausalLM", HFFamily::qwen3}, {"LlamaForCausalLM", HFFamily::llama}};

// Typed access to config keys; every message names the source and the key.
class Keys {
 public:
  Keys(const json& object, std::string source, std::string prefix = "")
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return object_.contains(key) && !object_[key].is_null(); }

  int64_t integer(const char* key) const {
    const json& value = required(key);
    if (!value.is_number_integer()) fail("{}: {}{} is {}; must be an integer", source_, prefix_, key, value.dump());
    return value.get<int64_t>();
  }
  int64_t integer(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }

  int64_t positive(const char* key) const {
    const int64_t value = integer(key);
    if (value < 1) fail("{}: {}{} is {}; must be >= 1", source_, prefix_, key, value);
    return value;
  }

  double number(const char* key) const {
    const json& value = required(key);
    if (!value.is_number()) fail("{}: {}{} is {}; must be a number", source_, prefix_, key, value.dump());
    return value.get<double>();
  }
  double number(const char* key, double fallback) const { return has(key) ? number(key) : fallback; }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& value = object_[key];
    if (!value.is_boolean()) fail("{}: {}{} is {}; must be true or false", source_, prefix_, key, value.dump());
    return value.get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& value = object_[key];
    if (!value.is_string()) fail("{}: {}{} is {}; must be a string", source_, prefix_, key, value.dump());
    return value.get<std::string>();
  }

  // An integer or a list of integers (eos_token_id).
  std::vector<int64_t> integers(const char* key) const {
    if (!has(key)) return {};
    const json& value = object_[key];
    if (value.is_number_integer()) return {value.get<int64_t>()};
    std::vector<int64_t> out;
    if (value.is_array())
      for (const json& item : value) {
        if (!item.is_number_integer()) break;
        out.push_back(item.get<int64_t>());
      }
    if (!value.is_array() || out.size() != value.size())
      fail("{}: {}{} is {}; must be an integer or a list of integers", source_, prefix_, key, value.dump());
    return out;
  }

 private:
  const json& required(const char* key) const {
    if (!has(key)) fail("{}: {}{} is missing", source_, prefix_, key);
    return object_[key];
  }
  const json& object_;
  std::string source_, prefix_;
};

RopeSettings parse_rope(const json& config, const std::string& source) {
  const Keys top(config, source);
  RopeSettings rope;
  // 5.x keeps everything in rope_parameters (rope_theta included); 4.x has rope_theta at the top
  // and the scaling, if any, in rope_scaling.
  const char* section = config.contains("rope_parameters") && !config["rope_parameters"].is_null() ? "rope_parameters"
                                                                                                     : "rope_scaling";
  rope.theta = top.number("rope_theta", rope.theta);
  if (!top.has(section)) return rope;
  const json& scaling = config[section];
  if (!scaling.is_object()) fail("{}: {} is {}; must be an object", source, section, scaling.dump());
  const Keys keys(scaling, source, std::string(section) + ".");
  rope.theta = keys.number("rope_theta", rope.theta);
  // The 4.x files of Llama-3.1 carry both `rope_type` and the older `type`; rope_type wins.
  rope.type = keys.string("rope_type", keys.string("type", "default"));
  if (rope.type == "llama3") {
    rope.factor = keys.number("factor");
    rope.low_freq_factor = keys.number("low_freq_factor");
    rope.high_freq_factor = keys.number("high_freq_factor");
    rope.original_max_position_embeddings = keys.positive("original_max_position_embeddings");
    if (!(rope.factor > 0) || !(rope.low_freq_factor > 0) || !(rope.high_freq_factor > rope.low_freq_factor))
      fail("{}: {}: llama3 needs factor > 0 and high_freq_factor > low_freq_factor > 0; got factor {}, "
           "low_freq_factor {}, high_freq_factor {}",
           source, section, rope.factor, rope.low_freq_factor, rope.high_freq_factor);
  } else if (rope.type != "default") {
    fail("{}: {}.rope_type is '{}'; supported: default, llama3", source, section, rope.type);
  }
  if (!(rope.theta > 0)) fail("{}: rope_theta is {}; must be > 0", source, rope.theta);
  return rope;
}

// A sliding window changes the attention pattern of some layers; the decoder attends to the full
// causal context, so a window that is in use is refused rather than ignored.
void refuse_sliding_window(const json& config, const std::string& source) {
  const Keys keys(config, source);
  if (keys.boolean("use_sliding_window", false))
    fail("{}: use_sliding_window is true; sliding-window attention is not supported (supported: false)", source);
  if (config.contains("layer_types") && config["layer_types"].is_array())
    for (const json& type : config["layer_types"])
      if (type != "full_attention")
        fail("{}: layer_types holds {}; supported: \"full_attention\" only", source, type.dump());
}

}  // namespace

HFConfig parse_hf_config(const std::string& json_text, const std::string& source) {
  json config;
  try {
    config = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  if (!config.is_object()) fail("{}: must be a JSON object", source);
  const Keys keys(config, source);

  HFConfig c;
  c.json = json_text;
  if (!keys.has("architectures") || !config["architectures"].is_array() || config["architectures"].size() != 1 ||
      !config["architectures"][0].is_string())
    fail("{}: architectures must be a list of one name; got {}; supported: Qwen2ForCausalLM, Qwen3ForCausalLM, "
         "LlamaForCausalLM",
         source, keys.has("architectures") ? config["architectures"].dump() : "nothing");
  c.architecture = config["architectures"][0].get<std::string>();
  bool known = false;
  for (const auto& [name, family] : kArchitectures)
    if (c.architecture == name) {
      c.family = family;
      known = true;
    }
  if (!known)
    fail("{}: architectures is [\"{}\"]; supported: Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM", source,
         c.architecture);

  c.vocab_size = keys.positive("vocab_size");
  c.hidden_size = keys.positive("hidden_size");
  c.intermediate_size = keys.positive("intermediate_size");
  c.num_hidden_layers = keys.positive("num_hidden_layers");
  c.num_attention_heads = keys.positive("num_attention_heads");
  c.num_key_value_heads = keys.integer("num_key_value_heads", c.num_attention_heads);
  if (c.num_key_value_heads < 1 || c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: num_key_value_heads is {}; must divide num_attention_heads ({})", source, c.num_key_value_heads,
         c.num_attention_heads);
  c.head_dim = keys.integer("head_dim", c.hidden_size / c.num_attention_heads);
  if (c.head_dim < 2 || c.head_dim % 2 != 0)
    fail("{}: head_dim is {}; must be even and >= 2 (rotary pairs)", source, c.head_dim);
  if (!keys.has("head_dim") && c.hidden_size % c.num_attention_heads != 0)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {} and no head_dim is given", source,
         c.hidden_size, c.num_attention_heads);
  c.max_position_embeddings = keys.positive("max_position_embeddings");
  c.rms_norm_eps = keys.number("rms_norm_eps");
  if (!(c.rms_norm_eps > 0)) fail("{}: rms_norm_eps is {}; must be > 0", source, c.rms_norm_eps);
  c.rope = parse_rope(config, source);
  c.tie_word_embeddings = keys.boolean("tie_word_embeddings", false);  // the default of all three config classes

  const std::string activation = keys.string("hidden_act", "silu");
  if (activation != "silu") fail("{}: hidden_act is '{}'; supported: silu", source, activation);
  const double dropout = keys.number("attention_dropout", 0.0);
  if (dropout != 0) fail("{}: attention_dropout is {}; supported: 0", source, dropout);
  refuse_sliding_window(config, source);

  const bool attention_bias = keys.boolean("attention_bias", false);
  c.qkv_bias = c.family == HFFamily::qwen2 || attention_bias;
  c.o_bias = c.family != HFFamily::qwen2 && attention_bias;
  c.mlp_bias = c.family == HFFamily::llama && keys.boolean("mlp_bias", false);
  c.qk_norm = c.family == HFFamily::qwen3;
  c.dtype = keys.string("dtype", keys.string("torch_dtype", ""));
  c.eos_token_ids = keys.integers("eos_token_id");
  c.bos_token_id = keys.integer("bos_token_id", -1);
  c.pad_token_id = keys.integer("pad_token_id", -1);
  return c;
}

HFConfig read_hf_config(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "config.json" : fs::path(path);
  return parse_hf_config(read_file(file.string(), "the HF config"), file.string());
}

std::string hf_config_json(const HFConfig& config, const std::string& dtype) {
  json out = json::parse(config.json);
  // 4.x reads torch_dtype, 5.x writes and reads dtype: set both so either loads it.
  out["torch_dtype"] = dtype;
  out["dtype"] = dtype;
  return out.dump(2) + "\n";
}

}  // namespace turnrl
