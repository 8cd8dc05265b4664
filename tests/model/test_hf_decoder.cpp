#include <catch2/catch.hpp>

#include <filesystem>

#include "model/hf_fixtures.h"
#include "turnrl/core/error.h"
#include "turnrl/model/hf_policy.h"

using namespace turnrl;
using namespace turnrl::test;

namespace {

std::vector<int64_t> greedy(HFPolicy& policy, const std::vector<int64_t>& prompt, int64_t tokens, bool cache) {
  const auto [prompts, mask] = left_pad({prompt}, 0);
  const Rollout r = policy.generate(prompts, mask, SamplingOptions().max_new(tokens).temp(0).cache(cache));
  const torch::Tensor generated = r.tokens[0].narrow(0, r.prompt_length, tokens).contiguous();
  return std::vector<int64_t>(generated.data_ptr<int64_t>(), generated.data_ptr<int64_t>() + tokens);
}

}  // namespace

TEST_CASE("hf_decoder: logits equal the reference in fp32 for Qwen2, Qwen3 and Llama-3", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);
    const HFReference reference = read_hf_reference(family);
    INFO("reference generator: " << reference.generator);
    auto policy = load_fixture(family);
    CHECK(policy->parameters().front().scalar_type() == torch::kFloat);
    for (size_t i = 0; i < reference.prompts.size(); ++i) {
      const torch::Tensor logits = logits_of(*policy, reference.prompts[i]);
      REQUIRE(logits.sizes() == reference.logits[i].sizes());
      CHECK(max_abs_diff(logits, reference.logits[i]) <= 1e-4);
      CHECK(reference.logits[i].abs().max().item<double>() > 1.0);  // not a degenerate model
    }
  }
}

TEST_CASE("hf_decoder: 64-token greedy continuations equal the reference, with and without the KV cache", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);
    const HFReference reference = read_hf_reference(family);
    auto policy = load_fixture(family);
    for (size_t i = 0; i < reference.prompts.size(); ++i) {
      CHECK(greedy(*policy, reference.prompts[i], 64, /*cache=*/true) == reference.greedy[i]);
      if (family == "qwen3") CHECK(greedy(*policy, reference.prompts[i], 64, /*cache=*/false) == reference.greedy[i]);
    }
  }
}

TEST_CASE("hf_decoder: a left-padded batch computes what each row computes alone", "[model]") {
  auto policy = load_fixture("llama");
  const std::vector<int64_t> short_prompt = {5, 6, 7}, long_prompt = {9, 10, 11, 12, 13, 14};
  const auto [tokens, mask] = left_pad({short_prompt, long_prompt}, 0);
  torch::NoGradGuard no_grad;
  const torch::Tensor batch = policy->model()->forward(tokens, mask);
  CHECK(max_abs_diff(batch[0].narrow(0, 3, 3), logits_of(*policy, short_prompt)) < 1e-5);
  CHECK(max_abs_diff(batch[1], logits_of(*policy, long_prompt)) < 1e-5);
  // Sampled rollouts: the log-probs the sampler records are those forward_logp recomputes.
  const Rollout r = policy->generate(tokens, mask, SamplingOptions().max_new(12).rng_seed(3).stop({2}));
  const TokenLogp t = policy->forward_logp(r.tokens, r.attention_mask, r.response_mask);
  CHECK(max_abs_diff(t.logp, r.logp) < 1e-4);
  CHECK(r.logp.abs().sum().item<double>() > 1.0);
}

TEST_CASE("hf_decoder: save_pretrained then load gives the same model, single file and sharded", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);
    auto policy = load_fixture(family);
    const std::vector<int64_t> prompt = read_hf_reference(family).prompts[0];
    ScratchFolder single("save_" + family), sharded("save_sharded_" + family);
    policy->save_pretrained(single.path);
    policy->save_pretrained(sharded.path, SavePretrainedOptions().max_shard_bytes(64 * 1024).copy_files_from(hf_fixture(family)));
    CHECK(std::filesystem::exists(sharded.file("model.safetensors.index.json")));
    CHECK(std::filesystem::exists(sharded.file("reference.json")) == false);  // only tokenizer / generation files
    for (const std::string& folder : {single.path, sharded.path}) {
      const HFConfig config = read_hf_config(folder);
      CHECK(config.architecture == policy->config().architecture);
      CHECK(config.dtype == "float32");
      auto loaded = load_hf_policy(HFModelOptions().path(folder).dtype(torch::kFloat));
      CHECK(max_abs_diff(logits_of(*loaded, prompt), logits_of(*policy, prompt)) == 0.0);
    }
    // save_pretrained drops a tied head as transformers does.
    CHECK(SafetensorsCheckpoint(single.path).contains("lm_head.weight") == !policy->config().tie_word_embeddings);
    // Policy::save / load (the trainer's checkpoints) without LoRA: the whole model.
    auto other = load_fixture(family);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : policy->parameters()) p.add_(0.01 * torch::randn_like(p));
    }
    REQUIRE(max_abs_diff(logits_of(*other, prompt), logits_of(*policy, prompt)) > 1e-3);
    policy->save(single.path);
    other->load(single.path);
    CHECK(max_abs_diff(logits_of(*other, prompt), logits_of(*policy, prompt)) == 0.0);
  }
}

TEST_CASE("hf_decoder: bf16 weights run in bf16 and stay close to fp32", "[model]") {
  auto fp32 = load_fixture("qwen3");
  auto bf16 = load_fixture("qwen3", torch::kBFloat16);
  CHECK(bf16->model()->dtype() == torch::kBFloat16);
  const std::vector<int64_t> prompt = read_hf_reference("qwen3").prompts[0];
  const torch::Tensor a = logits_of(*fp32, prompt), b = logits_of(*bf16, prompt);
  CHECK(b.scalar_type() == torch::kBFloat16);
  const double diff = max_abs_diff(a, b);
  CHECK(diff > 0);
  CHECK(diff < 0.1 * a.abs().max().item<double>());
}

TEST_CASE("hf_decoder: a checkpoint that does not fit its config is an error naming the tensor", "[model]") {
  ScratchFolder dir("bad_checkpoint");
  std::filesystem::copy_file(hf_fixture("qwen3") + "/config.json", dir.file("config.json"));
  const SafetensorsFile original(hf_fixture("qwen3") + "/model.safetensors");
  NamedTensors tensors;
  for (const std::string& name : original.names()) tensors.emplace_back(name, original.view(name));
  const auto load = [&](const NamedTensors& t) {
    write_safetensors(dir.file("model.safetensors"), t);
    return load_hf_policy(HFModelOptions().path(dir.path).dtype(torch::kFloat));
  };
  REQUIRE_NOTHROW(load(tensors));

  NamedTensors missing(tensors.begin() + 1, tensors.end());
  CHECK_THROWS_WITH(load(missing), Catch::Contains("'" + tensors.front().first + "' is missing"));
  NamedTensors extra = tensors;
  extra.emplace_back("model.layers.9.mlp.up_proj.weight", torch::zeros({2}));
  CHECK_THROWS_WITH(load(extra), Catch::Contains("model.layers.9.mlp.up_proj.weight") && Catch::Contains("does not have"));
  NamedTensors misshaped = tensors;
  for (auto& [name, tensor] : misshaped)
    if (name == "model.norm.weight") tensor = torch::zeros({63});
  CHECK_THROWS_WITH(load(misshaped), Catch::Contains("'model.norm.weight' has shape [63]") && Catch::Contains("[64]"));

  CHECK_THROWS_WITH(load_hf_policy(HFModelOptions().path(dir.file("nothing"))), Catch::Contains("model.path"));
  CHECK_THROWS_WITH(load_hf_policy(HFModelOptions()), Catch::Contains("model.path: empty"));
  CHECK_THROWS_WITH(hf_dtype_from_name("float64"), Catch::Contains("model.dtype: 'float64'"));
  CHECK(hf_dtype_from_name("bf16") == torch::kBFloat16);
}
