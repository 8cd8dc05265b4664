// The fused CUDA returns and TRLOO kernels against the tensor-op path and the scalar reference,
// in both launch shapes (one block in shared memory; several blocks in global memory).
#include <catch2/catch.hpp>

#include "support/batches.h"
#include "turnrl/algo/advantage.h"
#include "turnrl/algo/returns.h"
#include "turnrl/core/error.h"

using namespace turnrl;
using turnrl::testing::random_rows;
using turnrl::testing::to_batch;
using turnrl::testing::to_vector;

namespace {
TurnBatch on_cuda(TurnBatch b) {
  for (torch::Tensor* t : {&b.group, &b.traj, &b.turn, &b.reward, &b.turn_mask}) *t = t->to(torch::kCUDA);
  return b;
}
}  // namespace

TEST_CASE("fused CUDA returns and TRLOO equal the tensor path and the scalar reference", "[cuda][fused]") {
  if (!at::hasCUDA()) {
    WARN("no CUDA device visible: skipped");
    return;
  }
  struct Shape { int groups, n, turns; };
  // 16x16x3 fits one block; 3000x16x5 (about 144k rows) takes the multi-block path.
  for (const Shape s : {Shape{1, 1, 1}, Shape{16, 16, 3}, Shape{7, 5, 5}, Shape{3000, 16, 5}})
    for (const double gamma : {1.0, 0.9})
      for (const bool raw : {true, false}) {
        const auto rows = random_rows(uint64_t(s.groups * 31 + s.turns), s.groups, s.n, s.turns, 0.2);
        const TurnBatch b = on_cuda(to_batch(rows));
        const auto ro = ReturnOptions().with_gamma(gamma);
        const auto ao = AdvantageOptions().with_singleton(raw ? SingletonAdvantage::raw_return : SingletonAdvantage::zero);
        const torch::Tensor g_fused = compute_returns(b, ro);
        const torch::Tensor g_tensor = compute_returns(b, ReturnOptions(ro).with_fused_cuda(false));
        const auto g_ref = reference::returns(rows, reference::Returns::reward_to_go, gamma, true);
        const auto a_fused = to_vector(trloo_advantage(b, g_fused, ao));
        const auto a_tensor = to_vector(trloo_advantage(b, g_fused, AdvantageOptions(ao).with_fused_cuda(false)));
        const auto a_ref = reference::advantage("trloo", rows, g_ref, false, raw, 0.0);
        const auto gf = to_vector(g_fused), gt = to_vector(g_tensor);
        INFO("groups " << s.groups << " n " << s.n << " turns " << s.turns << " gamma " << gamma);
        for (size_t i = 0; i < rows.size(); ++i) {
          REQUIRE(gf[i] == Approx(gt[i]).margin(1e-5));
          REQUIRE(gf[i] == Approx(g_ref[i]).margin(1e-5));
          REQUIRE(a_fused[i] == Approx(a_tensor[i]).margin(2e-5));
          REQUIRE(a_fused[i] == Approx(a_ref[i]).margin(2e-5));
        }
      }
}

TEST_CASE("fused CUDA TRLOO rejects a NaN return naming the row, ignores masked ones", "[cuda][fused]") {
  if (!at::hasCUDA()) {
    WARN("no CUDA device visible: skipped");
    return;
  }
  const auto rows = random_rows(5, 4, 4, 3, 0.0);
  const TurnBatch b = on_cuda(to_batch(rows));
  torch::Tensor g = compute_returns(b).clone();
  g.index_put_({5}, std::numeric_limits<float>::quiet_NaN());
  REQUIRE_THROWS_WITH(trloo_advantage(b, g, {}), Catch::Contains("row 5"));
  TurnBatch masked = b;
  masked.turn_mask = b.turn_mask.clone();
  masked.turn_mask.index_put_({5}, false);
  const auto a = to_vector(trloo_advantage(masked, g, {}));
  for (double v : a) REQUIRE(std::isfinite(v));
}
