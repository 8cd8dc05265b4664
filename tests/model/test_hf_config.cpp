#include <catch2/catch.hpp>

#include <cmath>

#include <nlohmann/json.hpp>

#include "turnrl/core/error.h"
#include "turnrl/model/hf_config.h"
#include "turnrl/model/rope.h"

using namespace turnrl;
using nlohmann::json;

namespace {

// Qwen3-8B's config.json as transformers 4.x writes it.
json qwen3_8b() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// Llama-3.2-1B's, 4.x layout.
json llama_3_2_1b() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256})");
}

json qwen2_5_1_5b() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 1536, "intermediate_size": 8960,
    "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2",
    "num_attention_heads": 12, "num_hidden_layers": 28, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_sliding_window": false, "vocab_size": 151936})");
}

HFConfig parse(const json& j) { return parse_hf_config(j.dump(), "test config.json"); }

}  // namespace

TEST_CASE("hf_config: the three families read as transformers reads them", "[model]") {
  const HFConfig q3 = parse(qwen3_8b());
  CHECK(q3.family == HFFamily::qwen3);
  CHECK(q3.head_dim == 128);
  CHECK(q3.num_key_value_heads == 8);
  CHECK(q3.qk_norm);
  CHECK_FALSE(q3.qkv_bias);
  CHECK_FALSE(q3.o_bias);
  CHECK_FALSE(q3.tie_word_embeddings);
  CHECK(q3.rope.type == "default");
  CHECK(q3.rope.theta == 1e6);
  CHECK(q3.dtype == "bfloat16");
  CHECK(q3.eos_token_ids == std::vector<int64_t>{151645});

  const HFConfig q2 = parse(qwen2_5_1_5b());
  CHECK(q2.family == HFFamily::qwen2);
  CHECK(q2.head_dim == 128);  // 1536 / 12
  CHECK(q2.qkv_bias);         // Qwen2 always has q/k/v bias ...
  CHECK_FALSE(q2.o_bias);     // ... and never an o_proj bias
  CHECK_FALSE(q2.qk_norm);
  CHECK(q2.tie_word_embeddings);

  const HFConfig llama = parse(llama_3_2_1b());
  CHECK(llama.family == HFFamily::llama);
  CHECK(llama.rope.type == "llama3");
  CHECK(llama.rope.factor == 32.0);
  CHECK(llama.rope.original_max_position_embeddings == 8192);
  CHECK(llama.eos_token_ids == std::vector<int64_t>{128001, 128008, 128009});
  CHECK(llama.rms_norm_eps == 1e-5);

  json biased = llama_3_2_1b();
  biased["attention_bias"] = true;
  biased["mlp_bias"] = true;
  const HFConfig b = parse(biased);
  CHECK((b.qkv_bias && b.o_bias && b.mlp_bias));
  json no_kv = qwen3_8b();
  no_kv.erase("num_key_value_heads");
  CHECK(parse(no_kv).num_key_value_heads == 32);
}

TEST_CASE("hf_config: the 5.x rope_parameters layout equals the 4.x layout", "[model]") {
  json v5 = llama_3_2_1b();
  json rope = v5["rope_scaling"];
  rope["rope_theta"] = 500000.0;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5["rope_parameters"] = rope;
  v5["dtype"] = "float32";
  const HFConfig a = parse(llama_3_2_1b()), b = parse(v5);
  CHECK(b.rope.type == a.rope.type);
  CHECK(b.rope.theta == a.rope.theta);
  CHECK(b.rope.factor == a.rope.factor);
  CHECK(b.rope.low_freq_factor == a.rope.low_freq_factor);
  CHECK(b.rope.high_freq_factor == a.rope.high_freq_factor);
  CHECK(b.dtype == "float32");

  json plain = qwen3_8b();
  plain.erase("rope_theta");
  plain.erase("rope_scaling");
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  CHECK(parse(plain).rope.theta == 1e6);
  // The older `type` key of rope_scaling.
  json old = llama_3_2_1b();
  old["rope_scaling"].erase("rope_type");
  old["rope_scaling"]["type"] = "llama3";
  CHECK(parse(old).rope.type == "llama3");
}

TEST_CASE("hf_config: what the decoder cannot compute exactly is an error naming the key", "[model]") {
  const auto refused = [](json j, const char* key, const json& value) {
    j[key] = value;
    return j;
  };
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "architectures", {"MistralForCausalLM"})),
                    Catch::Contains("MistralForCausalLM") && Catch::Contains("supported: Qwen2ForCausalLM"));
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "architectures", json::array())), Catch::Contains("architectures"));
  json yarn = llama_3_2_1b();
  yarn["rope_scaling"]["rope_type"] = "yarn";
  CHECK_THROWS_WITH(parse(yarn), Catch::Contains("rope_scaling.rope_type is 'yarn'") && Catch::Contains("default, llama3"));
  json dynamic_v5 = qwen3_8b();
  dynamic_v5["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  CHECK_THROWS_WITH(parse(dynamic_v5), Catch::Contains("rope_parameters.rope_type is 'dynamic'"));
  json partial = llama_3_2_1b();
  partial["rope_scaling"].erase("low_freq_factor");
  CHECK_THROWS_WITH(parse(partial), Catch::Contains("rope_scaling.low_freq_factor is missing"));
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "use_sliding_window", true)), Catch::Contains("use_sliding_window"));
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "layer_types", {"full_attention", "sliding_attention"})),
                    Catch::Contains("sliding_attention"));
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "hidden_act", "gelu")), Catch::Contains("hidden_act is 'gelu'"));
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "attention_dropout", 0.1)), Catch::Contains("attention_dropout"));
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "num_key_value_heads", 5)), Catch::Contains("num_key_value_heads is 5"));
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "head_dim", 7)), Catch::Contains("head_dim is 7"));
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "hidden_size", "4096")), Catch::Contains("hidden_size is \"4096\""));
  CHECK_THROWS_WITH(parse(refused(qwen3_8b(), "eos_token_id", {1, "x"})), Catch::Contains("eos_token_id"));
  json no_vocab = qwen3_8b();
  no_vocab.erase("vocab_size");
  CHECK_THROWS_WITH(parse(no_vocab), Catch::Contains("vocab_size is missing"));
  CHECK_THROWS_WITH(parse_hf_config("{not json", "x.json"), Catch::Contains("x.json: not valid JSON"));
  CHECK_THROWS_WITH(read_hf_config("/nonexistent/folder"), Catch::Contains("/nonexistent/folder: cannot open the HF config"));
}

TEST_CASE("rope: inverse frequencies against a scalar loop, plain and llama3", "[model]") {
  for (const bool llama3 : {false, true}) {
    RopeSettings r;
    r.theta = 500000.0;
    if (llama3) {
      r.type = "llama3";
      r.factor = 32;
      r.low_freq_factor = 1;
      r.high_freq_factor = 4;
      r.original_max_position_embeddings = 8192;
    }
    const int64_t dim = 64;
    const torch::Tensor got = rope_inverse_frequencies(r, dim);
    REQUIRE(got.numel() == dim / 2);
    int regimes[3] = {0, 0, 0};
    for (int64_t i = 0; i < dim / 2; ++i) {
      double f = 1.0 / std::pow(r.theta, double(2 * i) / double(dim));
      if (llama3) {
        // Meta's reference (llama-models apply_scaling): by wavelength against the old context.
        const double wavelen = 2 * M_PI / f, low = 8192.0 / 1, high = 8192.0 / 4;
        if (wavelen < high) {
          ++regimes[0];
        } else if (wavelen > low) {
          f /= 32;
          ++regimes[2];
        } else {
          const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
          f = (1 - smooth) * f / 32 + smooth * f;
          ++regimes[1];
        }
      }
      CHECK(got[i].item<double>() == Approx(f).epsilon(2e-6));
    }
    if (llama3) CHECK((regimes[0] > 0 && regimes[1] > 0 && regimes[2] > 0));  // every branch was taken
  }
  CHECK_THROWS_WITH(rope_inverse_frequencies(RopeSettings(), 7), Catch::Contains("head_dim 7"));
}
