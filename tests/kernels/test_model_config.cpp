// ModelConfig (the model: section): builtin and hf keys read, printed and read back; errors name
// the key, including keys set for the other type of policy.
#include <catch2/catch.hpp>

#include <string>

#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/config.h"
#include "kernels/trainer_test_support.h"

using namespace turnrl;

namespace {

TrainConfig parse(const std::string& yaml) { return test::parse_config_text(yaml); }
std::string error_of(const std::string& yaml) { return test::config_error(yaml); }

}  // namespace

TEST_CASE("model.type defaults to builtin with the builtin's own context", "[trainer][model_config]") {
  const ModelConfig m = TrainConfig{}.model;
  CHECK(m.type == "builtin");
  CHECK(m.max_seq == 0);
  CHECK(builtin_max_seq(m) == 64);
  ModelConfig longer;
  longer.max_seq = 300;
  CHECK(builtin_max_seq(longer) == 300);
}

TEST_CASE("an hf model section with LoRA is read and survives config_to_yaml", "[trainer][model_config]") {
  const TrainConfig c = parse(R"(
model:
  type: hf
  path: /models/qwen3-tiny
  dtype: bfloat16
  tokenizer: /models/tok
  max_seq: 1024
  lora: {rank: 8, alpha: 32, rslora: true, target_modules: [q_proj, v_proj]}
env: {action: code}
)");
  CHECK(c.model.type == "hf");
  CHECK(c.model.path == "/models/qwen3-tiny");
  CHECK(c.model.dtype == "bfloat16");
  CHECK(c.model.tokenizer == "/models/tok");
  CHECK(c.model.lora.rank == 8);
  CHECK(c.model.lora.alpha == 32);
  CHECK(c.model.lora.rslora);
  CHECK(c.model.lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});
  const std::string yaml = config_to_yaml(c);
  CHECK(yaml.find("  lora:\n    rank: 8\n") != std::string::npos);
  CHECK(config_to_yaml(parse(yaml)) == yaml);
}

TEST_CASE("model errors name the key, the value and what is allowed", "[trainer][model_config]") {
  CHECK_THAT(error_of("model: {type: gguf}"), Catch::Contains("model.type") && Catch::Contains("hf"));
  CHECK_THAT(error_of("model: {type: hf}\nenv: {action: code}"), Catch::Contains("model.path") && Catch::Contains("init-model"));
  CHECK_THAT(error_of("model: {type: hf, path: /m, dtype: int8}\nenv: {action: code}"),
             Catch::Contains("model.dtype") && Catch::Contains("bfloat16"));
  CHECK_THAT(error_of("model: {type: hf, path: /m, lora: {rank: 4, target_modules: [qkv]}}\nenv: {action: code}"),
             Catch::Contains("model.lora.target_modules") && Catch::Contains("qkv") && Catch::Contains("q_proj"));
  CHECK_THAT(error_of("model: {type: hf, path: /m, lora: {rnak: 4}}\nenv: {action: code}"),
             Catch::Contains("model.lora") && Catch::Contains("rnak"));
  CHECK_THAT(error_of("model: {type: hf, path: /m, init: policy.pt}\nenv: {action: code}"),
             Catch::Contains("model.init") && Catch::Contains("builtin"));
  CHECK_THAT(error_of("model: {path: /m}"), Catch::Contains("model.path") && Catch::Contains("model.type: hf"));
  CHECK_THAT(error_of("model: {lora: {rank: 4}}"), Catch::Contains("model.lora.rank"));
  CHECK_THAT(error_of("model: {dtype: bfloat16}"), Catch::Contains("model.dtype"));
  CHECK_THAT(error_of("model: {max_seq: 8}"), Catch::Contains("model.max_seq") && Catch::Contains(">= 16"));
  CHECK(error_of("model: {type: hf, path: /m, dtype: float16, lora: {rank: 4}}\nenv: {action: code}").empty());
}

TEST_CASE("model.logp_chunk_size and model.activation_checkpointing: hf keys with checked values", "[trainer][model_config]") {
  const TrainConfig c = parse("model: {type: hf, path: /m, logp_chunk_size: 256, activation_checkpointing: true}\nenv: {action: code}");
  CHECK(c.model.logp_chunk_size == 256);
  CHECK(c.model.activation_checkpointing);
  CHECK(TrainConfig{}.model.logp_chunk_size == 1024);
  CHECK_FALSE(TrainConfig{}.model.activation_checkpointing);
  CHECK_THAT(error_of("model: {type: hf, path: /m, logp_chunk_size: 0}\nenv: {action: code}"),
             Catch::Contains("model.logp_chunk_size") && Catch::Contains("0"));
  CHECK_THAT(error_of("model: {logp_chunk_size: 64}"), Catch::Contains("model.logp_chunk_size") && Catch::Contains("model.type: hf"));
  CHECK_THAT(error_of("model: {activation_checkpointing: true}"),
             Catch::Contains("model.activation_checkpointing") && Catch::Contains("model.type: hf"));
  CHECK_THAT(error_of("trainer: {micro_batch_tokens: -1}"), Catch::Contains("trainer.micro_batch_tokens"));
  CHECK(parse("trainer: {micro_batch_tokens: 4096}").trainer.micro_batch_tokens == 4096);
}
