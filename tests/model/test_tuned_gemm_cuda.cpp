// tuned_linear, the decode step's projections by the cuBLASLt algorithm measured fastest for their
// shape (src/model/tuned_gemm.h): against a float64 product of the same inputs for 1 to 256 rows,
// float16 and bfloat16, with and without a bias; what it does not take left to linear(); nothing
// tuned inside a graph capture, and a tuned shape replayed from a graph as it runs eagerly.
#include <catch2/catch.hpp>

#include <algorithm>

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "model/tuned_gemm.h"

namespace d = turnrl::detail;

TEST_CASE("tuned_gemm: tuned projections equal a float64 product within the dtype's rounding", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  torch::NoGradGuard no_grad;
  torch::manual_seed(21);
  for (const torch::Dtype dtype : {torch::kBFloat16, torch::kHalf}) {
    const auto options = torch::TensorOptions(dtype).device(torch::kCUDA);
    // Qwen3-0.6B's down projection (1024 x 3072), and a narrow one whose weight fits the L2 cache.
    for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{1024, 3072}, {256, 512}}) {
      for (const int64_t rows : {int64_t(1), int64_t(7), int64_t(64), int64_t(256)}) {
        for (const bool with_bias : {false, true}) {
          INFO(c10::toString(dtype) << ", " << rows << " rows, " << n << " x " << k << (with_bias ? ", bias" : ""));
          const torch::Tensor w = torch::randn({n, k}, options) * 0.02;
          const torch::Tensor b = with_bias ? torch::randn({n}, options) : torch::Tensor();
          const torch::Tensor x = torch::randn({rows, k}, options);
          // Undefined where linear() measured fastest: the caller runs linear() then.
          const torch::Tensor tuned = d::tuned_linear(x, w, b);
          const torch::Tensor got = tuned.defined() ? tuned : at::linear(x, w, b);
          REQUIRE(got.sizes().vec() == std::vector<int64_t>{rows, n});
          REQUIRE(got.scalar_type() == dtype);
          torch::Tensor want = at::matmul(x.to(torch::kDouble), w.to(torch::kDouble).t());
          if (with_bias) want = want + b.to(torch::kDouble);
          // One rounding of the output (|y| up to about 5 here) and float32 sums in any order.
          const double tolerance = dtype == torch::kBFloat16 ? 4e-2 : 6e-3;
          const double diff = (got.to(torch::kDouble) - want).abs().max().item<double>();
          INFO("max |tuned - float64| " << diff);
          CHECK(diff < tolerance);
          // The kept choice: the same bits every call.
          const torch::Tensor again = d::tuned_linear(x, w, b);
          CHECK(again.defined() == tuned.defined());
          if (again.defined()) CHECK(torch::equal(again, got));
        }
      }
    }
  }
  // Every shape above was tuned once (not left to linear() by the cap on tuned shapes, which the
  // engine tests of this executable share): linear() and at least one cuBLASLt candidate timed.
  const std::vector<d::TunedGemmChoice> choices = d::tuned_gemm_choices();
  CHECK(choices.size() >= 32);
  for (const int64_t rows : {int64_t(1), int64_t(7), int64_t(64), int64_t(256)}) {
    const auto tuned = [&](int64_t n, int64_t k) {
      return std::count_if(choices.begin(), choices.end(), [&](const d::TunedGemmChoice& c) {
        return c.rows == rows && c.out_features == n && c.in_features == k;
      });
    };
    INFO(rows << " rows");
    CHECK(tuned(1024, 3072) >= 2);  // with and without a bias (a dtype is not part of a choice's report)
    CHECK(tuned(256, 512) >= 2);
  }
  int64_t kept_cublaslt = 0;
  for (const d::TunedGemmChoice& c : choices) {
    kept_cublaslt += !c.uses_linear;
    INFO(c.rows << " x " << c.out_features << " x " << c.in_features);
    CHECK(c.linear_us > 0);
    CHECK(c.chosen_us <= c.linear_us);
    CHECK(c.candidates > 0);
    CHECK(c.uses_linear == (c.chosen_us == c.linear_us));
  }
  WARN(kept_cublaslt << " of " << choices.size() << " shapes kept a cuBLASLt algorithm, the others linear()");
  // Not taken: more than 256 rows, float32, a CPU tensor, mismatched widths.
  const auto bf16 = torch::TensorOptions(torch::kBFloat16).device(torch::kCUDA);
  const torch::Tensor w = torch::randn({256, 512}, bf16);
  CHECK_FALSE(d::tuned_linear(torch::randn({257, 512}, bf16), w, {}).defined());
  CHECK_FALSE(d::tuned_linear(torch::randn({4, 512}, bf16.dtype(torch::kFloat)), w.to(torch::kFloat), {}).defined());
  CHECK_FALSE(d::tuned_linear(torch::randn({4, 512}, torch::kBFloat16), w.cpu(), {}).defined());
  CHECK_FALSE(d::tuned_linear(torch::randn({4, 256}, bf16), w, {}).defined());
}

TEST_CASE("tuned_gemm: nothing is tuned inside a graph capture, and a tuned shape replays as it runs eagerly",
          "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  torch::NoGradGuard no_grad;
  torch::manual_seed(22);
  const auto bf16 = torch::TensorOptions(torch::kBFloat16).device(torch::kCUDA);
  const torch::Tensor w = torch::randn({2048, 1024}, bf16) * 0.02;
  const torch::Tensor x = torch::randn({48, 1024}, bf16);
  const torch::Tensor untuned_x = torch::randn({47, 1024}, bf16);
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  c10::cuda::getCurrentCUDAStream().synchronize();
  torch::Tensor eager, captured;
  bool untuned_taken = true;
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    eager = d::tuned_linear(x, w, {});  // tunes 48 rows on this stream (and allocates its workspace)
    graph.capture_begin();
    captured = d::tuned_linear(x, w, {});
    untuned_taken = d::tuned_linear(untuned_x, w, {}).defined();  // 47 rows: never met outside a capture
    graph.capture_end();
  }
  side.synchronize();
  CHECK_FALSE(untuned_taken);
  // Defined when a cuBLASLt algorithm won the tuning (else both calls left it to linear()).
  REQUIRE(eager.defined() == captured.defined());
  if (!eager.defined()) return;
  graph.replay();
  c10::cuda::getCurrentCUDAStream().synchronize();
  CHECK(torch::equal(captured, eager));
}
