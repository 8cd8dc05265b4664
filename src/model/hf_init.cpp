#include "turnrl/model/hf_init.h"

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include "turnrl/core/error.h"
#include "turnrl/core/text.h"
#include "turnrl/core/install_paths.h"
#include "turnrl/model/hf_config.h"
#include "turnrl/model/hf_policy.h"

namespace turnrl {

using nlohmann::json;

namespace {

struct Shape {
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, max_positions;
  bool tied;
};

// The keys every family's config.json shares, from the shape and the tokenizer's ids.
json common_config(const Shape& s, const HfPresetVocab& v) {
  return {{"vocab_size", s.vocab},
          {"bos_token_id", v.bos_token_id},
          {"eos_token_id", v.eos_token_id},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.intermediate},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"head_dim", s.head_dim},
          {"hidden_act", "silu"},
          {"max_position_embeddings", s.max_positions},
          {"initializer_range", 0.02},
          {"use_cache", true},
          {"tie_word_embeddings", s.tied},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"torch_dtype", "bfloat16"}};
}

// Qwen3ForCausalLM as the Qwen3 releases' config.json files write it. Every preset names the
// transformers version its release was written with: transformers 5 warns of "an incorrect regex
// pattern" (a Mistral tokenizer bug) when it loads the tokenizer of a local folder whose
// config.json has no transformers_version.
json qwen3_config(const Shape& s, const HfPresetVocab& v) {
  json c = common_config(s, v);
  c.update({{"architectures", {"Qwen3ForCausalLM"}},
            {"model_type", "qwen3"},
            {"transformers_version", "4.51.0"},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 1000000.0},
            {"rope_scaling", nullptr},
            {"use_sliding_window", false},
            {"sliding_window", nullptr},
            {"max_window_layers", s.layers}});
  return c;
}

// Qwen2ForCausalLM as the Qwen2.5 releases' config.json files write it: no head_dim key (it is
// hidden_size / num_attention_heads) and no attention_bias key (Qwen2 always has q/k/v biases, never
// an o_proj bias); sliding_window is max_position_embeddings, unused while use_sliding_window is false.
json qwen2_config(const Shape& s, const HfPresetVocab& v) {
  json c = common_config(s, v);
  c.erase("head_dim");
  c.erase("attention_bias");
  c.update({{"architectures", {"Qwen2ForCausalLM"}},
            {"model_type", "qwen2"},
            {"transformers_version", "4.43.1"},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 1000000.0},
            {"use_sliding_window", false},
            {"sliding_window", s.max_positions},
            {"max_window_layers", s.layers}});
  return c;
}

// LlamaForCausalLM as Llama-3.2's config.json writes it (llama3 rope scaling).
json llama3_config(const Shape& s, const HfPresetVocab& v) {
  json c = common_config(s, v);
  c.update({{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"transformers_version", "4.45.0.dev0"},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 500000.0},
            {"rope_scaling",
             {{"rope_type", "llama3"},
              {"factor", 32.0},
              {"low_freq_factor", 1.0},
              {"high_freq_factor", 4.0},
              {"original_max_position_embeddings", 8192}}},
            {"mlp_bias", false},
            {"pretraining_tp", 1}});
  return c;
}

struct Preset {
  const char* name;
  const char* tokenizer;
  json (*config)(const Shape&, const HfPresetVocab&);
  Shape shape;
};

// The tokens config.json's bos_token_id / eos_token_id name in each family's released configs
// (Qwen3 and Qwen2.5: 151643 both; Llama-3.2: 128000, 128001).
struct FamilyTokens {
  const char* family;
  const char* bos;
  const char* eos;
};
const FamilyTokens kFamilyTokens[] = {
    {"qwen3", "<|endoftext|>", "<|endoftext|>"},
    {"llama3", "<|begin_of_text|>", "<|end_of_text|>"},
};

// The real shapes are those of the released config.json files (the base models'; Qwen2.5's from
// huggingface.co/Qwen/Qwen2.5-{0.5B,1.5B,7B}); the tiny ones train on two cores and take the
// tokenizer's vocabulary (vocab 0 here), so no embedding row goes unused. Qwen2.5 uses Qwen3's
// tokenizer files: the same byte-level BPE vocabulary and merges, Qwen3 adding four special tokens
// (<think>, </think>, <tool_response>, </tool_response>) that the 151,936-row embeddings already hold.
const Preset kPresets[] = {
    {"qwen3-tiny", "qwen3", qwen3_config, {128, 384, 4, 4, 2, 32, 0, 4096, true}},
    {"qwen3-0.6b", "qwen3", qwen3_config, {1024, 3072, 28, 16, 8, 128, 151936, 40960, true}},
    {"qwen3-1.7b", "qwen3", qwen3_config, {2048, 6144, 28, 16, 8, 128, 151936, 40960, true}},
    {"qwen3-8b", "qwen3", qwen3_config, {4096, 12288, 36, 32, 8, 128, 151936, 40960, false}},
    {"qwen2.5-tiny", "qwen3", qwen2_config, {128, 384, 4, 4, 2, 32, 0, 4096, true}},
    {"qwen2.5-0.5b", "qwen3", qwen2_config, {896, 4864, 24, 14, 2, 64, 151936, 32768, true}},
    {"qwen2.5-1.5b", "qwen3", qwen2_config, {1536, 8960, 28, 12, 2, 128, 151936, 131072, true}},
    {"qwen2.5-7b", "qwen3", qwen2_config, {3584, 18944, 28, 28, 4, 128, 152064, 131072, false}},
    {"llama3-tiny", "llama3", llama3_config, {128, 384, 4, 4, 2, 32, 0, 4096, true}},
    {"llama3.2-1b", "llama3", llama3_config, {2048, 8192, 16, 32, 8, 64, 128256, 131072, true}},
};

const Preset& preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return p;
  fail("--preset: '{}' is not a preset; allowed: {}", name, fmt::join(hf_preset_names(), ", "));
}

}  // namespace

const std::vector<std::string>& hf_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Preset& p : kPresets) out.push_back(p.name);
    return out;
  }();
  return names;
}

std::string hf_preset_tokenizer(const std::string& name) { return preset(name).tokenizer; }

HfPresetVocab hf_preset_vocab(const std::string& name, const BpeTokenizer& tokenizer) {
  const Preset& p = preset(name);
  for (const FamilyTokens& f : kFamilyTokens) {
    if (std::string(f.family) != p.tokenizer) continue;
    const auto id_of = [&](const char* token, const char* key) {
      const auto id = tokenizer.token_to_id(token);
      if (!id)
        fail("--preset {}: the tokenizer has no '{}', the token of config.json's {}; use a {} tokenizer", name, token,
             key, p.tokenizer);
      return *id;
    };
    return {tokenizer.vocab_size(), id_of(f.bos, "bos_token_id"), id_of(f.eos, "eos_token_id")};
  }
  fail("--preset {}: no special tokens known for the tokenizer family '{}'", name, p.tokenizer);
}

std::string hf_preset_config(const std::string& name, const HfPresetVocab& vocab) {
  const Preset& p = preset(name);
  Shape shape = p.shape;
  if (shape.vocab == 0) {
    if (vocab.size <= 0) fail("--preset {}: takes the tokenizer's vocabulary size, got {}", name, vocab.size);
    shape.vocab = vocab.size;
  }
  for (const auto& [key, id] : {std::pair{"bos_token_id", vocab.bos_token_id}, std::pair{"eos_token_id", vocab.eos_token_id}})
    if (id < 0 || id >= shape.vocab)
      fail("--preset {}: {} {} is outside the vocabulary (allowed: 0..{})", name, key, id, shape.vocab - 1);
  return p.config(shape, vocab).dump(2) + "\n";
}

std::string set_hf_config_key(const std::string& config_json, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--set '{}': expected key=value (a config.json key, e.g. --set num_hidden_layers=2)", assignment);
  json config = json::parse(config_json);
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  config[key] = value.is_discarded() ? json(text) : value;
  return config.dump(2) + "\n";
}

std::string hf_tokenizer_files(const std::string& family) {
  if (family != "qwen3" && family != "llama3") fail("tokenizer family '{}'; allowed: qwen3, llama3", family);
  const std::string file = ".deps/hf-tokenizers/" + family + "/tokenizer.json";
  try {
    const std::string found = find_turnrl_file(TurnrlFiles::data, file);
    return found.substr(0, found.size() - std::string("/tokenizer.json").size());
  } catch (const Error& e) {
    fail("the {} tokenizer files are missing (scripts/setup.sh fetches them; --tokenizer names another folder): {}",
         family, e.what());
  }
}

int64_t write_random_hf_model(const std::string& folder, const std::string& config_json,
                              const RandomHFModelOptions& options) {
  const HFConfig config = parse_hf_config(config_json, folder + "/config.json");
  const double init_std = json::parse(config_json).value("initializer_range", 0.02);
  if (!(init_std > 0)) fail("config.json: initializer_range {} must be > 0", init_std);
  HFDecoder model(config, torch::TensorOptions(options.dtype()));
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed());
  torch::NoGradGuard no_grad;
  int64_t count = 0;
  for (auto& p : model->named_parameters()) {
    torch::Tensor w = p.value();
    if (ends_with(p.key(), "norm.weight"))
      w.fill_(1.0);
    else if (ends_with(p.key(), ".bias"))
      w.zero_();
    else
      w.normal_(0.0, init_std, generator);
    count += w.numel();
  }
  HFPolicy(model).save_pretrained(folder, SavePretrainedOptions().copy_files_from(options.tokenizer_dir()));
  return count;
}

}  // namespace turnrl
