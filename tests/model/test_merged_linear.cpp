#include <catch2/catch.hpp>

#include <torch/types.h>

#include "model/decoder_parts.h"
#include "model/merged_linear.h"
#include "turnrl/model/lora.h"

using turnrl::LoraLinear;
using turnrl::detail::MergedLinear;

namespace {

LoraLinear random_linear(int64_t in, int64_t out, bool bias) {
  LoraLinear l(in, out, bias, torch::TensorOptions(torch::kFloat));
  torch::NoGradGuard no_grad;
  l->weight.normal_();
  if (bias) l->bias.normal_();
  return l;
}

torch::Tensor separate(const std::vector<LoraLinear>& parts, const torch::Tensor& x) {
  std::vector<torch::Tensor> outs;
  for (const auto& p : parts) outs.push_back(torch::linear(x, p->weight, p->bias));
  return torch::cat(outs, -1);
}

}  // namespace

TEST_CASE("merged_linear: one GEMM gives each part's output side by side, biases or not", "[model]") {
  torch::manual_seed(3);
  for (const bool bias : {false, true}) {
    INFO("bias " << bias);
    std::vector<LoraLinear> parts = {random_linear(8, 6, bias), random_linear(8, 3, false), random_linear(8, 5, bias)};
    MergedLinear merged;
    CHECK_FALSE(merged.ready());
    REQUIRE(merged.refresh({parts[0].get(), parts[1].get(), parts[2].get()}));
    const torch::Tensor x = torch::randn({2, 4, 8});
    const torch::Tensor got = merged(x), want = separate(parts, x);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(torch::allclose(got, want, 1e-5, 1e-5));
  }
}

TEST_CASE("merged_linear: a biased bf16 projection of [B, T, in] rounds once, as transformers' nn.Linear does",
          "[model]") {
  // PyTorch's F.linear (at::linear) folds a contiguous 3-D input into one addmm, whose bias joins
  // the float accumulator before the single rounding to bf16. LibTorch's C++ helper
  // torch::nn::functional::linear instead rounds the matmul and then adds the bias in bf16: one
  // element in four came out an ulp apart on Qwen2's q/k/v shapes (H100, 2026-12-07), enough that
  // the engine's paths sampled 40 of 57 tokens alike. Both forms must be the first one.
  torch::manual_seed(11);
  const auto bf16 = torch::TensorOptions(torch::kBFloat16);
  std::vector<LoraLinear> parts;
  for (int64_t out : {64, 32, 32}) {
    LoraLinear l(64, out, true, bf16);
    torch::NoGradGuard no_grad;
    l->weight.normal_(0, 0.25);
    l->bias.normal_(0, 0.1);
    parts.push_back(l);
  }
  MergedLinear merged;
  REQUIRE(merged.refresh({parts[0].get(), parts[1].get(), parts[2].get()}));
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({4, 3, 64}, bf16);
  const torch::Tensor flat = x.reshape({12, 64});
  int64_t rounded_twice_differs = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const torch::Tensor want = torch::addmm(parts[k]->bias, flat, parts[k]->weight.t()).view({4, 3, -1});
    CHECK(torch::equal(parts[k]->forward(x), want));
    rounded_twice_differs += (x.matmul(parts[k]->weight.t()) + parts[k]->bias != want).sum().item<int64_t>();
  }
  // The data tells the two roundings apart, so the equalities above test the choice.
  CHECK(rounded_twice_differs > 0);
  const torch::Tensor all = torch::addmm(merged.bias(), flat, merged.weight().t()).view({4, 3, -1});
  CHECK(torch::equal(merged(x), all));
}

TEST_CASE("merged_linear: a refresh follows in-place updates and replaced weights, in the same tensors", "[model]") {
  torch::manual_seed(4);
  std::vector<LoraLinear> parts = {random_linear(5, 4, true), random_linear(5, 2, true)};
  MergedLinear merged;
  const std::vector<const turnrl::LoraLinearImpl*> raw = {parts[0].get(), parts[1].get()};
  REQUIRE(merged.refresh(raw));
  const torch::Tensor x = torch::randn({3, 5});
  const torch::Tensor before = merged(x);
  {
    torch::NoGradGuard no_grad;
    parts[1]->weight.mul_(-2.0);  // an optimizer's in-place step
    parts[0]->bias.add_(1.0);
  }
  // Not refreshed yet: the copy still holds the old values (what a stale copy would serve).
  CHECK(torch::allclose(merged(x), before));
  REQUIRE(merged.refresh(raw));
  CHECK(torch::allclose(merged(x), separate(parts, x), 1e-5, 1e-5));
  CHECK_FALSE(torch::allclose(merged(x), before));
  // A part whose weight is replaced by another tensor (model->to(), set_data, load).
  {
    torch::NoGradGuard no_grad;
    parts[0]->weight = torch::randn_like(parts[0]->weight);
  }
  REQUIRE(merged.refresh(raw));
  CHECK(torch::allclose(merged(x), separate(parts, x), 1e-5, 1e-5));
}

TEST_CASE("merged_linear: the copy keeps its storage across refreshes (captured graphs read it)", "[model]") {
  torch::manual_seed(5);
  std::vector<LoraLinear> parts = {random_linear(4, 4, false), random_linear(4, 4, false)};
  const std::vector<const turnrl::LoraLinearImpl*> raw = {parts[0].get(), parts[1].get()};
  MergedLinear merged;
  REQUIRE(merged.refresh(raw));
  const void* storage = merged.weight().data_ptr();
  {
    torch::NoGradGuard no_grad;
    parts[0]->weight.add_(0.5);
  }
  CHECK(merged.placements() == 1);
  REQUIRE(merged.refresh(raw));
  CHECK(merged.weight().data_ptr() == storage);
  CHECK(merged.placements() == 1);  // refreshed in place: graphs reading it stay valid
  CHECK(torch::equal(merged.weight().narrow(0, 0, 4), parts[0]->weight));
  merged.clear();
  CHECK(merged.placements() == 2);  // freed: a graph reading it would be stale
}

TEST_CASE("merged_linear: a part with a LoRA adapter has no fixed weight, so nothing is merged", "[model]") {
  torch::manual_seed(6);
  std::vector<LoraLinear> parts = {random_linear(4, 3, false), random_linear(4, 3, false)};
  const std::vector<const turnrl::LoraLinearImpl*> raw = {parts[0].get(), parts[1].get()};
  MergedLinear merged;
  REQUIRE(merged.refresh(raw));
  parts[1]->add_adapter(2, 1.0);
  CHECK_FALSE(merged.refresh(raw));
  CHECK_FALSE(merged.ready());
}

TEST_CASE("merged_linear: input columns in a given order", "[model]") {
  torch::manual_seed(7);
  std::vector<LoraLinear> parts = {random_linear(6, 3, true)};
  const torch::Tensor order = torch::tensor({5, 3, 1, 0, 2, 4}, torch::kLong);
  MergedLinear merged;
  REQUIRE(merged.refresh({parts[0].get()}, order));
  const torch::Tensor x = torch::randn({2, 6});
  // A vector whose column c is x's column order[c], through the reordered copy, equals x through the part.
  CHECK(torch::allclose(merged(x.index_select(1, order)), separate(parts, x), 1e-5, 1e-5));
}

TEST_CASE("group_major_columns: query heads in FlashAttention's grouped order, by hand", "[model]") {
  // 4 query heads over 2 key/value heads (groups of 2): place p = i * 2 + j holds head j * 2 + i,
  // so places 0..3 hold heads 0, 2, 1, 3.
  CHECK(torch::equal(turnrl::detail::group_major_columns(4, 2, 1), torch::tensor({0, 2, 1, 3}, torch::kLong)));
  CHECK(torch::equal(turnrl::detail::group_major_columns(4, 2, 2), torch::tensor({0, 1, 4, 5, 2, 3, 6, 7}, torch::kLong)));
  // 6 heads over 2 (groups of 3): places hold heads 0, 3, 1, 4, 2, 5.
  CHECK(torch::equal(turnrl::detail::group_major_columns(6, 2, 1), torch::tensor({0, 3, 1, 4, 2, 5}, torch::kLong)));
  // One group: the natural order.
  CHECK(torch::equal(turnrl::detail::group_major_columns(3, 3, 2), torch::arange(6, torch::kLong)));
  CHECK_THROWS_WITH(turnrl::detail::group_major_columns(5, 2, 4), Catch::Contains("groups"));
}
