// The fused CUDA mismatch kernels against the CPU path and the scalar reference: every level of
// ratio rejection, k3 rejection, the veto and TIS; sorted, shuffled and undefined traj; masked
// NaN/inf/huge values; float, double and half inputs; identical log-probs; the NaN and traj-range
// errors; bypass; edge shapes; a large batch (many blocks, long rows), deterministic on the
// trainer's trajectory-major layout.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "support/batches.h"
#include "turnrl/algo/mismatch.h"
#include "turnrl/core/error.h"

using namespace turnrl;
using turnrl::testing::to_tensor;
using turnrl::testing::to_vector;

namespace {

bool skip_without_cuda() {
  if (at::hasCUDA()) return false;
  WARN("no CUDA device visible: skipped");
  return true;
}

struct Inputs {
  torch::Tensor old, rollout, mask, traj;
  Inputs to(const torch::Device& device) const {
    return {old.to(device), rollout.to(device), mask.to(device), traj.defined() ? traj.to(device) : torch::Tensor()};
  }
};

Inputs inputs_of(const reference::MismatchCase& c, at::ScalarType dtype, bool with_traj) {
  const int64_t rows = int64_t(c.mask.size()), len = rows > 0 ? int64_t(c.mask[0].size()) : 0;
  std::vector<double> old, rollout, mask;
  for (int64_t r = 0; r < rows; ++r) {
    old.insert(old.end(), c.old_logp[r].begin(), c.old_logp[r].end());
    rollout.insert(rollout.end(), c.rollout_logp[r].begin(), c.rollout_logp[r].end());
    mask.insert(mask.end(), c.mask[r].begin(), c.mask[r].end());
  }
  return {to_tensor(old, dtype).view({rows, len}), to_tensor(rollout, dtype).view({rows, len}),
          to_tensor(mask).view({rows, len}).to(at::kBool), with_traj ? at::tensor(c.traj, at::kLong) : torch::Tensor()};
}

MismatchResult run(const Inputs& in, int64_t trajectories, const MismatchOptions& o) {
  return compute_mismatch(in.old, in.rollout, in.mask, in.traj, trajectories, o);
}

MismatchOptions options_of(const reference::MismatchSpec& s) {
  return MismatchOptions().with_rs(parse_mismatch_level(s.rs_level), s.rs_lower, s.rs_upper)
      .with_rs_k3(parse_mismatch_level(s.k3_level), s.k3_upper).with_is(parse_mismatch_level(s.is_level), s.is_cap)
      .with_veto_threshold(s.veto_threshold);
}

std::string describe(const MismatchOptions& o) {
  return fmt::format("rs {} k3 {} is {}", to_string(o.rs_level), to_string(o.rs_k3_level), to_string(o.is_level));
}

// CUDA result against the CPU result: the same mask, weights and diagnostics up to rounding.
void require_same(const MismatchResult& gpu, const MismatchResult& cpu, double tol) {
  REQUIRE(gpu.response_mask.is_cuda());
  REQUIRE(gpu.weights.scalar_type() == cpu.weights.scalar_type());
  REQUIRE(at::equal(gpu.response_mask.cpu(), cpu.response_mask));
  REQUIRE(at::allclose(gpu.weights.cpu(), cpu.weights, tol, tol));
  const auto g = gpu.diagnostics.to_map(), c = cpu.diagnostics.to_map();
  REQUIRE(g.size() == c.size());
  for (const auto& kv : c) {
    INFO(kv.first);
    REQUIRE(g.at(kv.first) == Approx(kv.second).epsilon(1e-5).margin(1e-9));
  }
}

// The CUDA result in the scalar reference's terms.
reference::MismatchOutcome outcome_of(const MismatchResult& r) {
  reference::MismatchOutcome o;
  const torch::Tensor keep = r.response_mask.cpu(), weights = r.weights.cpu();
  for (int64_t row = 0; row < keep.size(0); ++row) {
    const auto k = to_vector(keep[row]);
    o.keep.emplace_back(k.begin(), k.end());
    o.weights.push_back(to_vector(weights[row]));
  }
  for (const auto& kv : r.diagnostics.to_map()) o.diagnostics[kv.first.substr(std::string("mismatch/").size())] = kv.second;
  return o;
}

}  // namespace

TEST_CASE("mismatch CUDA kernels equal the CPU path and the scalar reference at every level", "[cuda][mismatch]") {
  if (skip_without_cuda()) return;
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble})
    for (const bool sorted : {true, false})
      for (const bool with_traj : {true, false}) {
        const auto c = reference::random_mismatch_case(sorted ? 31 : 32, 40, 24, 13, sorted);
        const Inputs cpu = inputs_of(c, dtype, with_traj);
        const Inputs gpu = cpu.to(torch::kCUDA);
        for (const reference::MismatchSpec& spec : reference::mismatch_sweep()) {
          const MismatchOptions o = options_of(spec);
          INFO(describe(o) << " " << c10::toString(dtype) << " sorted " << sorted << " traj " << with_traj);
          const MismatchResult g = run(gpu, 13, o);
          require_same(g, run(cpu, 13, o), dtype == at::kDouble ? 1e-12 : 1e-6);
          const auto want = reference::mismatch(c.old_logp, c.rollout_logp, c.mask,
                                                with_traj ? c.traj : std::vector<int64_t>{}, spec);
          REQUIRE(reference::mismatch_difference(outcome_of(g), want, 1e-6) == "");
        }
      }
}

TEST_CASE("mismatch CUDA kernels: identical log-probs give weights of exactly 1 at every level", "[cuda][mismatch]") {
  if (skip_without_cuda()) return;
  const auto c = reference::random_mismatch_case(3, 9, 17, 4, true);
  const Inputs in = inputs_of(c, at::kFloat, true).to(torch::kCUDA);
  const Inputs same{in.rollout, in.rollout.clone(), in.mask, in.traj};
  for (MismatchLevel level : {MismatchLevel::token, MismatchLevel::turn, MismatchLevel::turn_geo,
                              MismatchLevel::sequence, MismatchLevel::geometric}) {
    INFO(to_string(level));
    const auto o = MismatchOptions().with_is(level, 2.0).with_rs(level, 1.0, 1.0).with_rs_k3(level, 1e-300);
    const MismatchResult r = run(same, 4, o);
    REQUIRE(at::equal(r.response_mask, same.mask));
    REQUIRE(at::equal(r.weights, same.mask.to(at::kFloat)));
    const auto d = r.diagnostics.to_map();
    for (const char* key : {"mismatch/rejected_token_fraction", "mismatch/rejected_row_fraction",
                            "mismatch/rejected_trajectory_fraction", "mismatch/vetoed_row_fraction", "mismatch/k3_kl",
                            "mismatch/mismatch_kl", "mismatch/log_ratio_abs_max", "mismatch/chi2_token",
                            "mismatch/chi2_sequence"})
      REQUIRE(d.at(key) == 0);
    REQUIRE(d.at("mismatch/ess") == 1);
    REQUIRE(d.at("mismatch/training_ppl") == d.at("mismatch/rollout_ppl"));
  }
  const MismatchResult bypass = compute_mismatch({}, in.rollout, in.mask, in.traj, 4, MismatchOptions().with_bypass(true));
  REQUIRE(at::equal(bypass.response_mask, in.mask));
  REQUIRE(at::equal(bypass.weights, in.mask.to(at::kFloat)));
}

TEST_CASE("mismatch CUDA kernels: masked values are ignored, NaN and out-of-range traj ids name the row",
          "[cuda][mismatch][edge]") {
  if (skip_without_cuda()) return;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const torch::Tensor roll = at::full({4, 4}, -1.0, at::kDouble);
  torch::Tensor old = roll + at::tensor({0.001, -0.002, 0.0005, 0.0, 0.003, 0.001, 0.002, -0.001, 0.002, 0.002, 0.001,
                                        0.001, 0.002, 0.001, 0.002, 0.001}, at::kDouble).view({4, 4});
  torch::Tensor mask = at::ones({4, 4}, at::kBool);
  mask[2][3] = false;
  mask[0][1] = false;
  const torch::Tensor traj = at::tensor(std::vector<int64_t>{0, 0, 1, 1}, at::kLong);
  const auto cuda = [](const torch::Tensor& t) { return t.to(torch::kCUDA); };
  const MismatchResult clean = compute_mismatch(cuda(old), cuda(roll), cuda(mask), cuda(traj), 2);
  torch::Tensor dirty_old = old.clone(), dirty_roll = roll.clone();
  dirty_old[2][3] = nan;
  dirty_roll[2][3] = 1e300;
  dirty_old[0][1] = -inf;
  dirty_roll[0][1] = inf;
  const MismatchResult dirty = compute_mismatch(cuda(dirty_old), cuda(dirty_roll), cuda(mask), cuda(traj), 2);
  REQUIRE(at::equal(clean.response_mask, dirty.response_mask));
  REQUIRE(at::equal(clean.weights, dirty.weights));
  REQUIRE(clean.diagnostics.to_map() == dirty.diagnostics.to_map());

  dirty_old[1][2] = nan;
  REQUIRE_THROWS_WITH(compute_mismatch(cuda(dirty_old), cuda(dirty_roll), cuda(mask), cuda(traj), 2),
                      Catch::Contains("row 1") && Catch::Contains("token 2"));
  const torch::Tensor bad_traj = at::tensor(std::vector<int64_t>{0, 0, 5, 1}, at::kLong);
  REQUIRE_THROWS_WITH(compute_mismatch(cuda(old), cuda(roll), cuda(mask), cuda(bad_traj), 2),
                      Catch::Contains("traj[2] = 5"));
  // Without the check nothing synchronises and nothing reads out of bounds.
  const auto unchecked = MismatchOptions().with_check_finite(false);
  const MismatchResult r = compute_mismatch(cuda(old), cuda(roll), cuda(mask), cuda(bad_traj), 2, unchecked);
  REQUIRE(at::isfinite(r.weights).all().item<bool>());
}

TEST_CASE("mismatch CUDA kernels: edge shapes and half inputs", "[cuda][mismatch][edge]") {
  if (skip_without_cuda()) return;
  struct Shape { size_t rows, len, trajectories; };
  for (const Shape s : {Shape{1, 1, 1}, Shape{1, 300, 1}, Shape{5, 1, 2}, Shape{7, 33, 7}, Shape{2, 257, 1}})
    for (const bool with_traj : {true, false}) {
      INFO(s.rows << "x" << s.len << " traj " << with_traj);
      const auto c = reference::random_mismatch_case(s.rows * 100 + s.len, s.rows, s.len, s.trajectories, true);
      const Inputs cpu = inputs_of(c, at::kFloat, with_traj);
      const auto o = MismatchOptions().with_is(MismatchLevel::sequence, 1.5).with_rs_k3(MismatchLevel::turn_geo, 1e-5);
      require_same(run(cpu.to(torch::kCUDA), int64_t(s.trajectories), o), run(cpu, int64_t(s.trajectories), o), 1e-6);
    }
  // Rows with nothing valid: nothing to reject, diagnostics 0 (ESS 1).
  const torch::Tensor none = at::zeros({3, 5}, at::TensorOptions(at::kBool).device(torch::kCUDA));
  const torch::Tensor logp = at::zeros({3, 5}, at::TensorOptions(at::kFloat).device(torch::kCUDA));
  const MismatchResult empty = compute_mismatch(logp, logp - 1, none, {}, 0);
  REQUIRE_FALSE(empty.response_mask.any().item<bool>());
  REQUIRE(empty.diagnostics.to_map().at("mismatch/ess") == 1);
  REQUIRE(empty.diagnostics.to_map().at("mismatch/rejected_row_fraction") == 0);
  // Half precision goes through float (compute_mismatch's compute type), on both devices.
  const auto c = reference::random_mismatch_case(77, 20, 40, 6, false, 0.01);
  const Inputs half = inputs_of(c, at::kHalf, true);
  const auto o = MismatchOptions().with_rs(MismatchLevel::token, 1.05).with_is(MismatchLevel::turn, 2.0);
  const MismatchResult g = run(half.to(torch::kCUDA), 6, o);
  REQUIRE(g.weights.scalar_type() == at::kFloat);
  require_same(g, run(half, 6, o), 1e-6);
}

TEST_CASE("mismatch CUDA kernels on a large batch: many blocks, long rows, deterministic on sorted traj",
          "[cuda][mismatch][large]") {
  if (skip_without_cuda()) return;
  at::manual_seed(5);
  struct Shape { int64_t rows, len; };
  for (const Shape s : {Shape{3000, 700}, Shape{48, 20000}})
    for (const bool sorted : {true, false}) {
      INFO(s.rows << "x" << s.len << " sorted " << sorted);
      const torch::Tensor roll = -3 * at::rand({s.rows, s.len});
      torch::Tensor old = roll + 0.002 * at::randn({s.rows, s.len});
      old.narrow(0, 0, s.rows / 10).add_(0.01);
      old[s.rows / 2][3] = -20.0;  // a vetoed row
      const torch::Tensor lengths = at::randint(0, s.len + 1, {s.rows});
      const torch::Tensor mask = at::arange(s.len).unsqueeze(0) < lengths.unsqueeze(1);
      torch::Tensor traj = at::arange(s.rows).div(3, "floor");
      if (!sorted) traj = traj.index_select(0, at::randperm(s.rows));
      const int64_t trajectories = (s.rows + 2) / 3;
      const Inputs cpu{old, roll, mask, traj};
      const Inputs gpu = cpu.to(torch::kCUDA);
      for (const auto& o : {MismatchOptions(), MismatchOptions().with_is(MismatchLevel::geometric, 1.001),
                            MismatchOptions().with_rs(MismatchLevel::token, 1.005).with_rs_k3(MismatchLevel::sequence, 1e-3)}) {
        INFO(describe(o));
        const MismatchResult g = run(gpu, trajectories, o);
        require_same(g, run(cpu, trajectories, o), 1e-6);
        if (!sorted) continue;
        const MismatchResult again = run(gpu, trajectories, o);
        REQUIRE(at::equal(g.weights, again.weights));
        REQUIRE(g.diagnostics.to_map() == again.diagnostics.to_map());
      }
    }
}
