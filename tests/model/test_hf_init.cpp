// hf_init presets: each preset's config.json loads through parse_hf_config with the released
// model's shape (Qwen2.5 values from the config.json files of huggingface.co/Qwen/Qwen2.5-0.5B,
// -1.5B and -7B, written out here by hand), and a tiny Qwen2.5 checkpoint builds with q/k/v biases,
// no o_proj bias and no q/k norms.
#include <map>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "turnrl/core/error.h"
#include "turnrl/model/hf_config.h"
#include "turnrl/model/hf_decoder.h"
#include "turnrl/model/hf_init.h"
#include "hf_tokenizer_files.h"

using namespace turnrl;

namespace {

struct Released {
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, max_positions;
  bool tied;
};

}  // namespace

TEST_CASE("qwen2.5 presets have the released config.json shapes and load as Qwen2") {
  const std::map<std::string, Released> released = {
      {"qwen2.5-0.5b", {896, 4864, 24, 14, 2, 64, 151936, 32768, true}},
      {"qwen2.5-1.5b", {1536, 8960, 28, 12, 2, 128, 151936, 131072, true}},
      {"qwen2.5-7b", {3584, 18944, 28, 28, 4, 128, 152064, 131072, false}},
      {"qwen2.5-tiny", {128, 384, 4, 4, 2, 32, 151669, 4096, true}},  // vocab: the tokenizer's
  };
  const BpeTokenizer qwen3 = BpeTokenizer::from_file(test::hf_tokenizer_dir("qwen3") + "/tokenizer.json");
  for (const auto& [name, r] : released) {
    INFO(name);
    CHECK(hf_preset_tokenizer(name) == "qwen3");
    const std::string text = hf_preset_config(name, hf_preset_vocab(name, qwen3));
    const HFConfig c = parse_hf_config(text, name);
    CHECK(c.architecture == "Qwen2ForCausalLM");
    CHECK(c.family == HFFamily::qwen2);
    CHECK(c.hidden_size == r.hidden);
    CHECK(c.intermediate_size == r.intermediate);
    CHECK(c.num_hidden_layers == r.layers);
    CHECK(c.num_attention_heads == r.heads);
    CHECK(c.num_key_value_heads == r.kv_heads);
    CHECK(c.head_dim == r.head_dim);
    CHECK(c.vocab_size == r.vocab);
    CHECK(c.max_position_embeddings == r.max_positions);
    CHECK(c.tie_word_embeddings == r.tied);
    CHECK(c.rope.type == "default");
    CHECK(c.rope.theta == 1e6);
    CHECK(c.rms_norm_eps == 1e-6);
    CHECK(c.qkv_bias);
    CHECK(!c.o_bias);
    CHECK(!c.mlp_bias);
    CHECK(!c.qk_norm);
    CHECK(c.eos_token_ids == std::vector<int64_t>{151643});
    CHECK(c.bos_token_id == 151643);
    // Keys as the released files write them: head_dim and attention_bias are not Qwen2 keys.
    const nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j.at("model_type") == "qwen2");
    CHECK(!j.contains("head_dim"));
    CHECK(!j.contains("attention_bias"));
    CHECK(j.at("use_sliding_window") == false);
    CHECK(j.at("max_window_layers") == r.layers);
  }
}

TEST_CASE("every preset's config.json loads through parse_hf_config") {
  for (const std::string& name : hf_preset_names()) {
    INFO(name);
    const HFConfig c = parse_hf_config(hf_preset_config(name, HfPresetVocab{1000, 7, 9}), name);
    CHECK(c.head_dim * c.num_attention_heads > 0);
    CHECK(c.num_attention_heads % c.num_key_value_heads == 0);
    // The tiny presets take the tokenizer's vocabulary, the real ones keep their own; both name the
    // tokenizer's bos/eos ids.
    CHECK((name.find("tiny") != std::string::npos) == (c.vocab_size == 1000));
    CHECK(c.bos_token_id == 7);
    CHECK(c.eos_token_ids == std::vector<int64_t>{9});
    // Without it, transformers 5 warns of a Mistral regex bug when it loads the folder's tokenizer.
    const std::string version =
        nlohmann::json::parse(hf_preset_config(name, HfPresetVocab{1000, 7, 9})).value("transformers_version", "");
    CHECK(version.rfind("4.", 0) == 0);
  }
  CHECK_THROWS_WITH(hf_preset_config("qwen2.5-3b", HfPresetVocab{1000, 0, 0}),
                    Catch::Contains("'qwen2.5-3b' is not a preset") && Catch::Contains("qwen2.5-0.5b"));
  CHECK_THROWS_WITH(hf_preset_config("qwen2.5-tiny", HfPresetVocab{0, 0, 0}),
                    Catch::Contains("takes the tokenizer's vocabulary size"));
  CHECK_THROWS_WITH(hf_preset_config("qwen3-tiny", HfPresetVocab{1000, 1000, 9}),
                    Catch::Contains("bos_token_id 1000 is outside the vocabulary (allowed: 0..999)"));
  CHECK_THROWS_WITH(hf_preset_config("llama3-tiny", HfPresetVocab{1000, 7, -1}),
                    Catch::Contains("eos_token_id -1 is outside the vocabulary"));
}

TEST_CASE("hf_preset_vocab finds each family's bos and eos tokens in the tokenizer by name") {
  const BpeTokenizer qwen3 = BpeTokenizer::from_file(test::hf_tokenizer_dir("qwen3") + "/tokenizer.json");
  const BpeTokenizer llama3 = BpeTokenizer::from_file(test::hf_tokenizer_dir("llama3") + "/tokenizer.json");
  // The released configs' ids: Qwen3 151643 (<|endoftext|>) both; Llama-3.2 128000, 128001.
  const HfPresetVocab q = hf_preset_vocab("qwen3-0.6b", qwen3);
  CHECK(q.size == 151669);
  CHECK(q.bos_token_id == 151643);
  CHECK(q.eos_token_id == 151643);
  const HfPresetVocab l = hf_preset_vocab("llama3.2-1b", llama3);
  CHECK(l.size == 128256);
  CHECK(l.bos_token_id == 128000);
  CHECK(l.eos_token_id == 128001);
  const nlohmann::json released = nlohmann::json::parse(hf_preset_config("llama3.2-1b", l));
  CHECK(released.at("vocab_size") == 128256);
  CHECK(released.at("bos_token_id") == 128000);
  CHECK(released.at("eos_token_id") == 128001);
  CHECK_THROWS_WITH(hf_preset_vocab("llama3-tiny", qwen3),
                    Catch::Contains("no '<|begin_of_text|>'") && Catch::Contains("bos_token_id"));
}

TEST_CASE("a qwen2.5-tiny decoder has q/k/v biases and neither an o_proj bias nor q/k norms") {
  const HFConfig c = parse_hf_config(hf_preset_config("qwen2.5-tiny", HfPresetVocab{300, 0, 0}), "qwen2.5-tiny");
  HFDecoder model(c, torch::TensorOptions(torch::kFloat));
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& p : model->named_parameters()) shapes[p.key()] = p.value().sizes().vec();
  const std::string layer = "model.layers.0.self_attn.";
  REQUIRE(shapes.count(layer + "q_proj.bias"));
  CHECK(shapes[layer + "q_proj.bias"] == std::vector<int64_t>{128});
  CHECK(shapes[layer + "k_proj.bias"] == std::vector<int64_t>{64});  // 2 KV heads x head_dim 32
  CHECK(shapes[layer + "v_proj.bias"] == std::vector<int64_t>{64});
  CHECK(!shapes.count(layer + "o_proj.bias"));
  CHECK(!shapes.count(layer + "q_norm.weight"));
  CHECK(!shapes.count("lm_head.weight"));  // tied to the embeddings
}
