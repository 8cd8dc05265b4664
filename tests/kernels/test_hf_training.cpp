// An HF policy through the kernel recipe on a CPU: `turnrl init-model`'s random Qwen3 folder
// (model/hf_init.h), code actions through the real Qwen3 tokenizer and chat template, checkpoints
// whose policy/ folder is a complete HF folder, and a resume that continues bit for bit.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/hf_tokenizer_files.h"
#include "kernels/trainer_test_support.h"
#include "turnrl/core/error.h"
#include "turnrl/model/hf_init.h"
#include "turnrl/model/hf_policy.h"
#include "turnrl/model/hf_tokenizer.h"
#include "turnrl/model/safetensors.h"
#include "turnrl/rl/checkpoint.h"
#include "turnrl/kernels/kernel_recipe.h"
#include "turnrl/rl/policy_factory.h"

using namespace turnrl;
namespace fs = std::filesystem;

namespace {

// qwen3-tiny made smaller still (hidden 64, 2 layers), with the real Qwen3 tokenizer.
std::string tiny_qwen3(const std::string& name) {
  const std::string dir = test::fresh_dir(name);
  const std::string tokenizer = test::hf_tokenizer_dir("qwen3");
  std::string config =
      hf_preset_config("qwen3-tiny", hf_preset_vocab("qwen3-tiny", load_hf_chat_tokenizer(tokenizer)->tokenizer()));
  for (const char* set : {"hidden_size=64", "intermediate_size=128", "num_hidden_layers=2", "head_dim=16"})
    config = set_hf_config_key(config, set);
  write_random_hf_model(dir, config, RandomHFModelOptions().seed(3).tokenizer_dir(tokenizer));
  return dir;
}

TrainConfig hf_config(const std::string& model_dir, const std::string& run_dir, int64_t steps) {
  TrainConfig c = test::tiny_config(run_dir, steps);
  c.model.type = "hf";
  c.model.path = model_dir;
  c.model.max_seq = 1024;
  c.env.action = ActionFormat::code;
  c.env.max_turns = 1;
  c.tasks.include = {"relu_bias"};
  c.trainer.tasks_per_step = 1;
  c.trainer.samples_per_task = 2;
  c.sampling.max_new_tokens = 8;
  // Random text fails the format alike in every episode, so the advantages are 0; the entropy
  // bonus still moves every weight, which the resume must reproduce.
  c.policy_loss.entropy_coef = 0.01;
  return c;
}

std::vector<torch::Tensor> parameters_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.policy().parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace

TEST_CASE("init-model's folder has a valid safetensors header, transformers' init and loads back", "[trainer][hf]") {
  const std::string dir = tiny_qwen3("init-model");
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    INFO(file);
    CHECK(fs::exists(fs::path(dir) / file));
  }
  // The header: 8-byte little-endian length, then JSON whose offsets tile the data exactly.
  std::ifstream in(dir + "/model.safetensors", std::ios::binary);
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  std::string header(header_size, '\0');
  in.read(header.data(), std::streamsize(header_size));
  const nlohmann::json entries = nlohmann::json::parse(header);
  const uint64_t file_size = fs::file_size(dir + "/model.safetensors");
  uint64_t covered = 0;
  for (const auto& [name, entry] : entries.items()) {
    if (name == "__metadata__") continue;
    CHECK(entry["dtype"] == "F32");
    covered += entry["data_offsets"][1].get<uint64_t>() - entry["data_offsets"][0].get<uint64_t>();
  }
  CHECK(8 + header_size + covered == file_size);
  CHECK(entries.contains("model.embed_tokens.weight"));
  CHECK_FALSE(entries.contains("lm_head.weight"));  // tied, as save_pretrained writes it

  const SafetensorsCheckpoint weights(dir);
  const torch::Tensor embedding = weights.view("model.embed_tokens.weight").to(torch::kDouble);
  CHECK(embedding.size(0) == 151669);
  CHECK(embedding.mean().item<double>() == Approx(0.0).margin(1e-3));
  CHECK(embedding.std().item<double>() == Approx(0.02).epsilon(0.01));
  CHECK(torch::equal(weights.view("model.norm.weight"), torch::ones({64})));
  CHECK(torch::equal(weights.view("model.layers.1.self_attn.q_norm.weight"), torch::ones({16})));

  ModelConfig m;
  m.type = "hf";
  m.path = dir;
  const ChatPolicy p = make_chat_policy(m, 1, torch::kCPU);
  CHECK(p.max_seq == 4096);
  CHECK(p.tokenizer->vocab_size() == 151669);
  // Same seed, same weights.
  const std::string again = tiny_qwen3("init-model-again");
  CHECK(torch::equal(SafetensorsCheckpoint(again).view("model.layers.0.mlp.up_proj.weight"),
                     weights.view("model.layers.0.mlp.up_proj.weight")));
}

TEST_CASE("forward_logp with a response mask equals the full-vocabulary computation", "[trainer][hf]") {
  auto policy = load_hf_policy(HFModelOptions().path(tiny_qwen3("logp")).dtype(torch::kFloat));
  torch::manual_seed(5);
  const torch::Tensor tokens = torch::randint(0, 151669, {3, 12}, torch::kLong);
  torch::Tensor response = torch::zeros({3, 12}, torch::kBool);
  response.index_put_({0, torch::indexing::Slice(8, 12)}, true);
  response.index_put_({2, torch::indexing::Slice(0, 3)}, true);  // column 0 has no prediction
  const TokenLogp fast = policy->forward_logp(tokens, {}, response);
  const TokenLogp full = token_logp_from_logits(policy->model()->forward(tokens), tokens, response);
  CHECK(torch::allclose(fast.logp, full.logp, 1e-5, 1e-6));
  CHECK(torch::allclose(fast.entropy, full.entropy, 1e-5, 1e-6));
  CHECK(fast.logp[1].abs().sum().item<float>() == 0.0f);
  CHECK(fast.logp[2][0].item<float>() == 0.0f);
  CHECK(fast.logp[0][9].item<float>() < 0.0f);
  // Gradients flow through the selected positions.
  policy->forward_logp(tokens, {}, response).logp.sum().backward();
  CHECK(policy->model()->named_parameters()["model.embed_tokens.weight"].grad().abs().sum().item<float>() > 0);
}

TEST_CASE("model.engine sizes the hf policy's generation engine, and a turn that does not fit names the key", "[trainer][hf]") {
  ModelConfig m;
  m.type = "hf";
  m.path = tiny_qwen3("engine-sizes");
  m.engine.slots = 6;
  m.engine.capacity = 300;
  m.engine.prefill_tokens = 64;
  const ChatPolicy p = make_chat_policy(m, 1, torch::kCPU);
  auto* hf = dynamic_cast<HFPolicy*>(p.policy.get());
  REQUIRE(hf != nullptr);
  SamplingOptions sampling;
  sampling.max_new_tokens = 4;
  const torch::Tensor prompts = torch::randint(0, 151669, {2, 10}, torch::kLong);
  hf->generate(prompts, torch::ones({2, 10}, torch::kBool), sampling);
  REQUIRE(hf->engine() != nullptr);
  CHECK(hf->engine()->options().slots() == 6);     // not the call's 2 rows
  CHECK(hf->engine()->options().capacity() == 300);  // not 256, the call's need rounded up
  CHECK(hf->engine()->options().prefill_tokens() == 64);
  CHECK(hf->engine()->options().decode_attention() == DecodeAttention::split_kv);  // the defaults
  CHECK(hf->engine()->options().fused_kernels());
  CHECK(hf->engine()->options().overlap_steps());
  // The engine's switches reach it too.
  ModelConfig switched = m;
  switched.engine.cuda_graphs = false, switched.engine.fused_kernels = false;
  switched.engine.merged_projections = false, switched.engine.decode_attention = "flash";
  switched.engine.overlap_steps = false;
  const ChatPolicy q = make_chat_policy(switched, 1, torch::kCPU);
  auto* hf_switched = dynamic_cast<HFPolicy*>(q.policy.get());
  REQUIRE(hf_switched != nullptr);
  hf_switched->generate(prompts, torch::ones({2, 10}, torch::kBool), sampling);
  REQUIRE(hf_switched->engine() != nullptr);
  const GenerationEngineOptions& e = hf_switched->engine()->options();
  CHECK(!e.cuda_graphs());
  CHECK(!e.fused_kernels());
  CHECK(!e.merged_projections());
  CHECK(e.decode_attention() == DecodeAttention::flash);
  CHECK(!e.overlap_steps());
  sampling.max_new_tokens = 291;  // 10 + 291 > 300
  CHECK_THROWS_WITH(hf->generate(prompts, torch::ones({2, 10}, torch::kBool), sampling),
                    Catch::Contains("model.engine.capacity") && Catch::Contains("301"));
  // The builtin policy has no engine: its keys there are a mistake, named.
  ModelConfig builtin;
  builtin.engine.slots = 4;
  CHECK_THROWS_WITH(check_model_config(builtin), Catch::StartsWith("model.engine.slots: '4' is set but model.type is 'builtin'"));
  ModelConfig tiny = m;
  tiny.engine.capacity = 1;
  CHECK_THROWS_WITH(check_model_config(tiny), Catch::StartsWith("model.engine.capacity: 1 is too small"));
}

TEST_CASE("an hf policy trains with code actions, checkpoints a complete HF folder and resumes bit for bit", "[trainer][hf]") {
  const std::string model = tiny_qwen3("train-model");
  const auto evaluator = std::make_shared<test::PlanRuleEvaluator>();
  KernelTrainer straight(hf_config(model, test::fresh_dir("hf-straight"), 2), evaluator);
  REQUIRE(straight.policy().saves_folder());
  straight.train();
  const std::string resumed_dir = test::fresh_dir("hf-resumed");
  {
    KernelTrainer first(hf_config(model, resumed_dir, 1), evaluator);
    first.train();
  }
  KernelTrainer second(hf_config(model, resumed_dir, 2), evaluator);
  second.train(/*resume=*/true);
  CHECK(second.step() == 2);
  const auto a = parameters_of(straight), b = parameters_of(second);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));

  // The newest checkpoint's policy/ is an HF folder that model.path loads, tokenizer included.
  const auto latest = latest_checkpoint(resumed_dir + "/checkpoints");
  REQUIRE(latest);
  const std::string exported = latest->path + "/policy";
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    INFO(file);
    CHECK(fs::exists(fs::path(exported) / file));
  }
  CHECK_FALSE(fs::exists(latest->path + "/policy.pt"));
  ModelConfig m;
  m.type = "hf";
  m.path = exported;
  const auto c = make_chat_policy(m, 1, torch::kCPU).policy->parameters();
  REQUIRE(c.size() == b.size());
  for (size_t i = 0; i < c.size(); ++i) CHECK(torch::equal(c[i], b[i]));
  m.path = model;
  const auto initial = make_chat_policy(m, 1, torch::kCPU).policy->parameters();
  int64_t trained = 0;
  for (size_t i = 0; i < initial.size(); ++i) trained += !torch::equal(initial[i], b[i]);
  CHECK(trained == int64_t(initial.size()));
}

TEST_CASE("model.type hf with env.action plan is refused naming env.action", "[trainer][hf]") {
  TrainConfig c = hf_config("/nonexistent", test::fresh_dir("hf-plan"), 1);
  c.env.action = ActionFormat::plan;
  CHECK_THROWS_WITH(kernel_recipe(c, std::make_shared<test::PlanRuleEvaluator>()), Catch::Contains("env.action"));
}

TEST_CASE("with LoRA the checkpoint's policy/ is a peft adapter folder that resumes", "[trainer][hf]") {
  const std::string model = tiny_qwen3("lora-model");
  const auto evaluator = std::make_shared<test::PlanRuleEvaluator>();
  const std::string dir = test::fresh_dir("hf-lora");
  const auto with_lora = [&](int64_t steps) {
    TrainConfig c = hf_config(model, dir, steps);
    c.model.lora.rank = 4;
    c.model.lora.target_modules = {"q_proj", "v_proj"};
    return c;
  };
  std::vector<torch::Tensor> adapters;
  {
    KernelTrainer first(with_lora(1), evaluator);
    first.train();
    adapters = parameters_of(first);
  }
  REQUIRE(adapters.size() == 2 * 2 * 2);  // 2 layers x {q_proj, v_proj} x {A, B}
  const std::string policy = latest_checkpoint(dir + "/checkpoints")->path + "/policy";
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"}) {
    INFO(file);
    CHECK(fs::exists(fs::path(policy) / file));
  }
  CHECK_FALSE(fs::exists(fs::path(policy) / "model.safetensors"));
  // Resuming reads the adapters back into a fresh policy (whose own adapters start elsewhere).
  KernelTrainer resumed(with_lora(1), evaluator);
  REQUIRE(resumed.resume());
  const auto loaded = parameters_of(resumed);
  for (size_t i = 0; i < loaded.size(); ++i) CHECK(torch::equal(loaded[i], adapters[i]));
}
