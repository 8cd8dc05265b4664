// make_chat_policy: the builtin policy over the byte tokenizer as the kernel recipe built it, and
// an hf folder with its tokenizer (errors name the model.* key).
#include <catch2/catch.hpp>

#include <string>

#include "model/hf_tokenizer_files.h"
#include "turnrl/core/error.h"
#include "turnrl/model/transformer.h"
#include "turnrl/trainer/policy_factory.h"

using namespace turnrl;

TEST_CASE("a builtin model section gives a TransformerPolicy over the byte chat tokenizer", "[trainer][policy_factory]") {
  ModelConfig m;
  m.d_model = 32, m.layers = 1, m.heads = 2, m.max_seq = 128;
  const ChatPolicy a = make_chat_policy(m, 7, torch::kCPU);
  const ChatPolicy b = make_chat_policy(m, 7, torch::kCPU);
  const auto* builtin = dynamic_cast<TransformerPolicy*>(a.policy.get());
  REQUIRE(builtin != nullptr);
  CHECK(builtin->options().vocab() == a.tokenizer->vocab_size());
  CHECK(builtin->options().max_seq() == 128);
  CHECK(dynamic_cast<const ByteChatTokenizer*>(a.tokenizer.get()) != nullptr);
  CHECK(a.max_seq == 128);
  // Seeded: the same seed draws the same weights, as the recipe's torch::manual_seed did.
  const auto pa = a.policy->parameters(), pb = b.policy->parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
  m.max_seq = 0;
  CHECK(make_chat_policy(m, 7, torch::kCPU).max_seq == 64);
}

TEST_CASE("an hf folder whose tokenizer has more ids than the model's vocabulary is refused", "[trainer][policy_factory]") {
  ModelConfig m;
  m.type = "hf";
  m.path = std::string(TURNRL_TEST_DATA_DIR) + "/hf/qwen3";  // vocab_size 320
  m.tokenizer = test::hf_tokenizer_dir("qwen3");            // 151,669 ids
  CHECK_THROWS_WITH(make_chat_policy(m, 1, torch::kCPU),
                    Catch::Contains("model.tokenizer") && Catch::Contains("151669") && Catch::Contains("320"));
  m.path = "/nonexistent/model";
  CHECK_THROWS_WITH(make_chat_policy(m, 1, torch::kCPU), Catch::Contains("model.path"));
}
