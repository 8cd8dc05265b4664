#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "model/hf_fixtures.h"
#include "turnrl/core/error.h"
#include "turnrl/model/hf_policy.h"
#include "turnrl/model/lora.h"

using namespace turnrl;
using namespace turnrl::test;

namespace {

// Moves every lora_B away from zero so adapters change the model.
void perturb_adapters(HFPolicy& policy, double scale) {
  torch::NoGradGuard no_grad;
  for (const auto& p : policy.model()->named_parameters())
    if (p.key().find(".lora_B.") != std::string::npos) p.value().copy_(scale * torch::randn_like(p.value()));
}

const std::vector<int64_t> kPrompt = {3, 14, 15, 92, 65, 35, 89, 79};

}  // namespace

TEST_CASE("lora: options, scale and rsLoRA scale", "[model]") {
  CHECK(LoraOptions().rank(8).alpha(16).scale() == 2.0);
  CHECK(LoraOptions().rank(16).alpha(16).rslora(true).scale() == 4.0);
  CHECK_THROWS_WITH(validate(LoraOptions().rank(-1)), Catch::Contains("lora.rank: -1"));
  CHECK_THROWS_WITH(validate(LoraOptions().rank(4).alpha(0)), Catch::Contains("lora.alpha"));
  CHECK_THROWS_WITH(validate(LoraOptions().rank(4).target_modules({"qkv"})),
                    Catch::Contains("unknown module 'qkv'") && Catch::Contains("q_proj"));
  CHECK_THROWS_WITH(validate(LoraOptions().rank(4).target_modules({})), Catch::Contains("lora.target_modules"));
  CHECK_NOTHROW(validate(LoraOptions().rank(0).target_modules({})));  // off: targets unused
}

TEST_CASE("lora: a linear layer with an adapter against the formula by hand", "[model]") {
  torch::manual_seed(0);
  LoraLinear linear(6, 4, /*bias=*/true, torch::TensorOptions(torch::kFloat));
  {
    torch::NoGradGuard no_grad;
    linear->weight.normal_();
    linear->bias.normal_();
  }
  linear->add_adapter(2, 0.5);
  CHECK(linear->lora_A->weight.sizes() == torch::IntArrayRef{2, 6});
  CHECK(linear->lora_B->weight.sizes() == torch::IntArrayRef{4, 2});
  CHECK(linear->lora_B->weight.abs().sum().item<double>() == 0.0);  // B starts at zero
  // kaiming_uniform(a = sqrt(5)) bounds A by 1 / sqrt(fan_in).
  CHECK(linear->lora_A->weight.abs().max().item<double>() <= 1.0 / std::sqrt(6.0));
  CHECK(linear->lora_A->weight.abs().max().item<double>() > 0.0);
  CHECK_FALSE(linear->weight.requires_grad());
  CHECK_FALSE(linear->bias.requires_grad());
  {
    torch::NoGradGuard no_grad;
    linear->lora_B->weight.normal_();
  }
  const torch::Tensor x = torch::randn({3, 6});
  torch::Tensor expected = torch::zeros({3, 4});
  const auto W = linear->weight, b = linear->bias, A = linear->lora_A->weight, B = linear->lora_B->weight;
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t o = 0; o < 4; ++o) {
      double y = b[o].item<double>();
      for (int64_t i = 0; i < 6; ++i) y += x[n][i].item<double>() * W[o][i].item<double>();
      for (int64_t r = 0; r < 2; ++r) {
        double ax = 0;
        for (int64_t i = 0; i < 6; ++i) ax += x[n][i].item<double>() * A[r][i].item<double>();
        y += 0.5 * B[o][r].item<double>() * ax;
      }
      expected[n][o] = y;
    }
  CHECK(max_abs_diff(linear->forward(x), expected) < 1e-5);
  const torch::Tensor before = linear->forward(x).detach();
  linear->merge_adapter();
  CHECK_FALSE(linear->has_adapter());
  CHECK(linear->named_parameters().size() == 2);
  CHECK(max_abs_diff(linear->forward(x), before) < 1e-5);
  CHECK_THROWS_WITH((linear->add_adapter(2, 1.0), linear->add_adapter(2, 1.0)), Catch::Contains("already"));
}

TEST_CASE("lora: a fresh adapter leaves the model unchanged and only adapters are trainable", "[model]") {
  torch::manual_seed(1);
  auto base = load_fixture("qwen3");
  auto adapted = load_fixture("qwen3", torch::kFloat, LoraOptions().rank(4).alpha(8).target_modules({"q_proj", "v_proj", "down_proj"}));
  CHECK(max_abs_diff(logits_of(*adapted, kPrompt), logits_of(*base, kPrompt)) == 0.0);

  const std::vector<torch::Tensor> trainable = adapted->parameters();
  CHECK(trainable.size() == 2 * 3 * 2);  // (A, B) x 3 targets x 2 layers
  for (const auto& p : trainable) CHECK(p.scalar_type() == torch::kFloat);
  perturb_adapters(*adapted, 0.1);
  const TokenLogp t = adapted->forward_logp(row(kPrompt));
  t.logp.sum().backward();
  for (const auto& p : adapted->model()->named_parameters()) {
    INFO(p.key());
    const bool adapter = p.key().find(".lora_") != std::string::npos;
    CHECK(p.value().requires_grad() == adapter);
    CHECK(p.value().grad().defined() == adapter);
    if (adapter) CHECK(p.value().grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("lora: peft names, adapter save and load, merged export equals the adapted model", "[model]") {
  torch::manual_seed(2);
  for (const bool rslora : {false, true}) {
    const LoraOptions lora = LoraOptions().rank(4).alpha(8).rslora(rslora);
    auto adapted = load_fixture("llama", torch::kFloat, lora);
    perturb_adapters(*adapted, 0.2);
    const torch::Tensor expected = logits_of(*adapted, kPrompt);
    CHECK(max_abs_diff(expected, logits_of(*load_fixture("llama"), kPrompt)) > 1e-2);

    ScratchFolder adapter("adapter"), merged("merged");
    adapted->save(adapter.path);  // with LoRA: the adapters, peft layout
    const SafetensorsFile file(adapter.file("adapter_model.safetensors"));
    CHECK(file.contains("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
    CHECK(file.contains("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"));
    CHECK(file.names().size() == 2 * 7 * 2);
    CHECK(file.entry("base_model.model.model.layers.0.mlp.gate_proj.lora_A.weight").shape == std::vector<int64_t>{4, 64});
    const nlohmann::json config = nlohmann::json::parse(read_text(adapter.file("adapter_config.json")));
    CHECK(config["peft_type"] == "LORA");
    CHECK(config["r"] == 4);
    CHECK(config["lora_alpha"] == 8.0);
    CHECK(config["use_rslora"] == rslora);
    CHECK(config["target_modules"].size() == 7);

    // For benchmarks/device/check_peft.py: peft's PeftModel.from_pretrained over the same base
    // (tests/data/hf/llama) must give these logits.
    if (const char* root = std::getenv("TURNRL_PEFT_EXPORT")) {
      const std::string dir = std::string(root) + (rslora ? "/llama-rslora" : "/llama-lora");
      adapted->save(dir);
      write_safetensors(dir + "/turnrl_logits.safetensors",
                        {{"prompt", torch::tensor(kPrompt, torch::kLong).to(torch::kFloat)}, {"logits", expected}});
    }

    auto reloaded = load_fixture("llama", torch::kFloat, lora);
    reloaded->load(adapter.path);
    CHECK(max_abs_diff(logits_of(*reloaded, kPrompt), expected) == 0.0);

    // save_pretrained merges W + scale * B A: a plain checkpoint that equals base + adapter.
    adapted->save_pretrained(merged.path);
    CHECK_FALSE(SafetensorsFile(merged.file("model.safetensors")).contains("model.layers.0.self_attn.q_proj.lora_A.weight"));
    auto plain = load_hf_policy(HFModelOptions().path(merged.path).dtype(torch::kFloat));
    CHECK(max_abs_diff(logits_of(*plain, kPrompt), expected) < 1e-4);

    auto wrong_rank = load_fixture("llama", torch::kFloat, LoraOptions().rank(2));
    CHECK_THROWS_WITH(wrong_rank->load(adapter.path), Catch::Contains("lora.rank is 2"));
    auto wrong_targets = load_fixture("llama", torch::kFloat, LoraOptions().rank(4).target_modules({"q_proj"}));
    CHECK_THROWS_WITH(wrong_targets->load(adapter.path), Catch::Contains("target_modules"));
  }
  auto no_lora = load_fixture("llama");
  CHECK_THROWS_WITH(no_lora->save_adapter("/tmp"), Catch::Contains("no LoRA adapters"));
}

TEST_CASE("lora: bf16 base with float32 adapters trains", "[model]") {
  torch::manual_seed(3);
  auto policy = load_fixture("qwen2", torch::kBFloat16, LoraOptions().rank(8).alpha(16));
  for (const auto& p : policy->parameters()) CHECK(p.scalar_type() == torch::kFloat);
  perturb_adapters(*policy, 0.05);
  const TokenLogp t = policy->forward_logp(row(kPrompt));
  CHECK(std::isfinite(t.logp.sum().item<double>()));
  t.logp.sum().backward();
  for (const auto& p : policy->parameters()) CHECK(p.grad().defined());
  // A cast of the policy (e.g. an fp32 trainer copy) keeps the adapters in float32.
  policy->to(torch::kFloat);
  CHECK(policy->model()->dtype() == torch::kFloat);
  policy->to(torch::kBFloat16);
  CHECK(policy->model()->dtype() == torch::kBFloat16);
  for (const auto& p : policy->parameters()) CHECK(p.scalar_type() == torch::kFloat);
}
