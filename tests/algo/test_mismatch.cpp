// Mismatch correction: research §9 example 6 (the recipe's MRS), every ratio level against a
// scalar loop, identical log-probs, a planted outlier, TIS caps, NaN and huge inputs, diagnostics.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "support/batches.h"
#include "turnrl/algo/mismatch.h"
#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"

using namespace turnrl;
using turnrl::testing::to_tensor;
using turnrl::testing::to_vector;

namespace {

torch::Tensor matrix(const std::vector<std::vector<double>>& rows, at::ScalarType dtype = at::kFloat) {
  std::vector<double> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return to_tensor(flat, dtype).view({int64_t(rows.size()), -1});
}

torch::Tensor ids(const std::vector<int64_t>& v) { return at::tensor(v, at::kLong); }

std::vector<double> kept_rows(const MismatchResult& r) { return to_vector(r.response_mask.any(1)); }

// Research §9 example 6: T = 2, 4 tokens per row, rollout_logp = 0 so log ratio = old_logp.
torch::Tensor example6_old() {
  return matrix({{0.001, -0.002, 0.0005, 0}, {0.003, 0.001, 0.002, -0.001},
                 {0.002, 0.002, 0.001, 0.001}, {0.002, 0.001, 0.002, 0.001}});
}

MismatchOptions rs_off() { return MismatchOptions().with_rs(MismatchLevel::off, 1.0).with_veto_threshold(0); }

// Scalar reference for the log of a level's ratio at (row, token), in double.
double reference_level_log(const std::vector<std::vector<double>>& lr, const std::vector<std::vector<bool>>& m,
                           const std::vector<int64_t>& traj, MismatchLevel level, size_t row, size_t tok) {
  double sum = 0, count = 0;
  for (size_t r = 0; r < lr.size(); ++r) {
    const bool member = (level == MismatchLevel::turn || level == MismatchLevel::turn_geo) ? r == row : traj[r] == traj[row];
    if (!member) continue;
    for (size_t k = 0; k < lr[r].size(); ++k)
      if (m[r][k]) sum += lr[r][k], count += 1;
  }
  switch (level) {
    case MismatchLevel::token: return lr[row][tok];
    case MismatchLevel::turn: case MismatchLevel::sequence: return sum;
    default: return count > 0 ? sum / count : 0;
  }
}

}  // namespace

TEST_CASE("worked example 6: geometric rejection keeps trajectory 1 and rejects trajectory 2", "[mismatch][worked]") {
  const torch::Tensor old = example6_old();
  const torch::Tensor mask = at::ones({4, 4}, at::kBool);
  const MismatchResult r = compute_mismatch(old, at::zeros_like(old), mask, ids({0, 0, 1, 1}), 2);  // recipe defaults
  REQUIRE(kept_rows(r) == std::vector<double>{1, 1, 0, 0});
  REQUIRE(to_vector(r.weights) == to_vector(r.response_mask));  // IS off: weights are the kept mask
  REQUIRE(r.diagnostics.rejected_trajectory_fraction.item<double>() == Approx(0.5));
  REQUIRE(r.diagnostics.rejected_row_fraction.item<double>() == Approx(0.5));
  REQUIRE(r.diagnostics.rejected_token_fraction.item<double>() == Approx(0.5));
  REQUIRE(r.diagnostics.vetoed_row_fraction.item<double>() == 0);
}

TEST_CASE("worked example 6: the veto rejects only the turn with a tiny ratio", "[mismatch][worked]") {
  torch::Tensor old = example6_old();
  old[1][2] = -10.0;  // ρ = 4.5e-5 < 1e-4
  const MismatchOptions veto_only = MismatchOptions().with_rs(MismatchLevel::off, 1.0);
  const MismatchResult r = compute_mismatch(old, at::zeros_like(old), at::ones({4, 4}, at::kBool), ids({0, 0, 1, 1}),
                                            2, veto_only);
  REQUIRE(kept_rows(r) == std::vector<double>{1, 0, 1, 1});
  REQUIRE(r.diagnostics.vetoed_row_fraction.item<double>() == Approx(0.25));
  REQUIRE(r.diagnostics.rejected_trajectory_fraction.item<double>() == 0);
}

TEST_CASE("worked example 6: token TIS weights", "[mismatch][worked]") {
  const torch::Tensor old = example6_old();
  const MismatchResult r = compute_mismatch(old, at::zeros_like(old), at::ones({4, 4}, at::kBool), ids({0, 0, 1, 1}),
                                            2, rs_off().with_is(MismatchLevel::token, 2.0));
  const auto w = to_vector(r.weights[0]);
  const std::vector<double> want = {1.0010005, 0.9980020, 1.0005001, 1.0};
  for (size_t k = 0; k < 4; ++k) REQUIRE(w[k] == Approx(want[k]).margin(1e-6));
}

TEST_CASE("identical log-probs give weights of exactly 1 and reject nothing, at every level", "[mismatch]") {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-8.0, 0.0);
  std::vector<double> v(6 * 7);
  for (double& x : v) x = u(rng);
  const torch::Tensor logp = to_tensor(v).view({6, 7});
  const torch::Tensor mask = at::arange(7).unsqueeze(0) < at::tensor(std::vector<int64_t>{7, 3, 0, 5, 1, 7}).unsqueeze(1);
  const torch::Tensor traj = ids({0, 0, 1, 2, 2, 2});
  for (MismatchLevel level : {MismatchLevel::token, MismatchLevel::turn, MismatchLevel::turn_geo,
                              MismatchLevel::sequence, MismatchLevel::geometric}) {
    INFO(to_string(level));
    const auto o = MismatchOptions().with_is(level, 2.0).with_rs(level, 1.0, 1.0);  // even the tightest band
    const MismatchResult r = compute_mismatch(logp, logp.clone(), mask, traj, 3, o);
    REQUIRE(at::equal(r.response_mask, mask));
    REQUIRE(at::equal(r.weights, mask.to(at::kFloat)));
    const auto d = r.diagnostics.to_map();
    for (const char* key : {"mismatch/rejected_token_fraction", "mismatch/rejected_row_fraction",
                            "mismatch/rejected_trajectory_fraction", "mismatch/k3_kl", "mismatch/mismatch_kl",
                            "mismatch/log_ratio_abs_max", "mismatch/chi2_token", "mismatch/chi2_sequence"})
      REQUIRE(d.at(key) == 0);
    REQUIRE(d.at("mismatch/ess") == 1);
    REQUIRE(d.at("mismatch/training_ppl") == Approx(d.at("mismatch/rollout_ppl")));
  }
}

TEST_CASE("every ratio level and TIS cap equals its scalar definition on ragged multi-turn data", "[mismatch]") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, 0.6);
  const std::vector<int64_t> traj = {2, 0, 2, 1, 0, 2, 3};  // rows of 4 trajectories, shuffled
  const std::vector<int64_t> lengths = {5, 3, 0, 6, 1, 4, 2};
  const size_t n = traj.size(), len = 6;
  std::vector<std::vector<double>> lr(n, std::vector<double>(len));
  std::vector<std::vector<bool>> m(n, std::vector<bool>(len));
  std::vector<double> old_flat, roll_flat, mask_flat;
  for (size_t r = 0; r < n; ++r)
    for (size_t k = 0; k < len; ++k) {
      lr[r][k] = noise(rng);
      m[r][k] = int64_t(k) < lengths[r];
      if (!m[r][k]) lr[r][k] = 0;
      roll_flat.push_back(-1.5);
      old_flat.push_back(-1.5 + lr[r][k]);
      mask_flat.push_back(m[r][k]);
    }
  const torch::Tensor old = to_tensor(old_flat, at::kDouble).view({int64_t(n), int64_t(len)});
  const torch::Tensor roll = to_tensor(roll_flat, at::kDouble).view_as(old);
  const torch::Tensor mask = to_tensor(mask_flat).view_as(old).to(at::kBool);
  for (MismatchLevel level : {MismatchLevel::token, MismatchLevel::turn, MismatchLevel::turn_geo,
                              MismatchLevel::sequence, MismatchLevel::geometric})
    for (double cap : {0.8, 2.0}) {
      INFO(to_string(level) << " cap " << cap);
      const MismatchResult r = compute_mismatch(old, roll, mask, ids(traj), 4, rs_off().with_is(level, cap));
      const auto w = to_vector(r.weights);
      for (size_t row = 0; row < n; ++row)
        for (size_t k = 0; k < len; ++k) {
          const double lg = reference_level_log(lr, m, traj, level, row, k);
          const double want = m[row][k] ? std::min(std::exp(std::max(-20.0, std::min(20.0, lg))), cap) : 0.0;
          REQUIRE(w[row * len + k] == Approx(want).epsilon(1e-9));
          REQUIRE(w[row * len + k] <= cap);
        }
    }
}

TEST_CASE("a planted outlier trajectory is rejected at sequence level; token level masks only its bad tokens",
          "[mismatch]") {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> small(-1e-4, 1e-4);
  const int64_t n = 6, len = 8;  // 3 trajectories x 2 turns
  torch::Tensor lr = at::empty({n, len}, at::kDouble);
  for (int64_t i = 0; i < n * len; ++i) lr.view(-1)[i] = small(rng);
  lr[3][2] = 0.5;  // trajectory 1, turn 1: two tokens with ρ = 1.65
  lr[3][6] = 0.5;
  const torch::Tensor roll = at::full({n, len}, -2.0, at::kDouble);
  const torch::Tensor mask = at::ones({n, len}, at::kBool);
  const torch::Tensor traj = ids({0, 0, 1, 1, 2, 2});

  const MismatchResult seq = compute_mismatch(roll + lr, roll, mask, traj, 3,
                                              MismatchOptions().with_rs(MismatchLevel::sequence, 0.9, 1.1));
  REQUIRE(kept_rows(seq) == std::vector<double>{1, 1, 0, 0, 1, 1});

  const MismatchResult tok = compute_mismatch(roll + lr, roll, mask, traj, 3,
                                              MismatchOptions().with_rs(MismatchLevel::token, 0.9, 1.1));
  REQUIRE(kept_rows(tok) == std::vector<double>{1, 1, 1, 1, 1, 1});
  const torch::Tensor expected = mask.clone();
  expected[3][2] = false;
  expected[3][6] = false;
  REQUIRE(at::equal(tok.response_mask, expected));
  REQUIRE(tok.diagnostics.rejected_token_fraction.item<double>() == Approx(2.0 / 48));
  REQUIRE(tok.diagnostics.log_ratio_abs_max.item<double>() == Approx(0.5));
}

TEST_CASE("masked tokens are ignored whatever their values; NaN on a valid token names the row", "[mismatch][edge]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  torch::Tensor old = example6_old();
  torch::Tensor roll = at::zeros_like(old);
  torch::Tensor mask = at::ones({4, 4}, at::kBool);
  mask[2][3] = false;
  const MismatchResult clean = compute_mismatch(old, roll, mask, ids({0, 0, 1, 1}), 2);
  old[2][3] = nan;
  roll[2][3] = 1e30;
  const MismatchResult dirty = compute_mismatch(old, roll, mask, ids({0, 0, 1, 1}), 2);
  REQUIRE(at::equal(clean.response_mask, dirty.response_mask));
  REQUIRE(at::equal(clean.weights, dirty.weights));
  for (const auto& kv : dirty.diagnostics.to_map()) REQUIRE(kv.second == clean.diagnostics.to_map().at(kv.first));

  old[1][1] = nan;
  REQUIRE_THROWS_AS(compute_mismatch(old, roll, mask, ids({0, 0, 1, 1}), 2), Error);
  REQUIRE_THROWS_WITH(compute_mismatch(old, roll, mask, ids({0, 0, 1, 1}), 2), Catch::Contains("row 1"));
}

TEST_CASE("huge finite log-probs give finite weights and diagnostics", "[mismatch][edge]") {
  const torch::Tensor old = matrix({{-3e38, 0.0, -1e30}, {3e38, -5.0, 0.0}});
  const torch::Tensor roll = matrix({{3e38, -1e30, 0.0}, {-3e38, -5.0, -1e-30}});
  const torch::Tensor mask = at::ones({2, 3}, at::kBool);
  for (MismatchLevel level : {MismatchLevel::token, MismatchLevel::turn, MismatchLevel::turn_geo,
                              MismatchLevel::sequence, MismatchLevel::geometric})
   for (bool fused : {true, false}) {
    INFO(to_string(level) << " fused " << fused);
    const MismatchResult r = compute_mismatch(old, roll, mask, ids({0, 0}), 1,
                                              MismatchOptions().with_is(level, 2.0).with_rs(level, 0.5, 2.0).with_fused(fused));
    REQUIRE(at::isfinite(r.weights).all().item<bool>());
    for (const auto& kv : r.diagnostics.to_map()) {
      INFO(kv.first);
      REQUIRE(std::isfinite(kv.second));
    }
  }
}

TEST_CASE("diagnostics match hand-computed values", "[mismatch]") {
  // One row, lr = [0.1, -0.2] on two valid tokens, a third token masked.
  const torch::Tensor roll = matrix({{-1.0, -2.0, -7.0}}, at::kDouble);
  const torch::Tensor old = matrix({{-0.9, -2.2, 0.0}}, at::kDouble);
  const torch::Tensor mask = matrix({{1, 1, 0}}).to(at::kBool);
  const auto d = compute_mismatch(old, roll, mask, {}, 0, rs_off()).diagnostics.to_map();
  REQUIRE(d.at("mismatch/log_ratio_abs_mean") == Approx(0.15));
  REQUIRE(d.at("mismatch/log_ratio_abs_max") == Approx(0.2));
  REQUIRE(d.at("mismatch/mismatch_kl") == Approx(0.05));
  REQUIRE(d.at("mismatch/k3_kl") == Approx(((std::exp(0.1) - 1.1) + (std::exp(-0.2) + 0.2 - 1)) / 2));
  REQUIRE(d.at("mismatch/chi2_token") == Approx((std::exp(0.2) + std::exp(-0.4)) / 2 - 1));
  REQUIRE(d.at("mismatch/chi2_sequence") == Approx(std::exp(-0.2) - 1));
  REQUIRE(d.at("mismatch/training_ppl") == Approx(std::exp(1.55)));
  REQUIRE(d.at("mismatch/rollout_ppl") == Approx(std::exp(1.5)));
  const double w1 = std::exp(0.1), w2 = std::exp(-0.2), mw = (w1 + w2) / 2;
  REQUIRE(d.at("mismatch/ess") == Approx(1 / (((w1 / mw) * (w1 / mw) + (w2 / mw) * (w2 / mw)) / 2)));
}

TEST_CASE("compute_mismatch reads a TurnBatch; options come from YAML", "[mismatch][config]") {
  TurnBatch b = make_turn_batch(ids({0, 0, 0, 0}), ids({0, 0, 1, 1}), ids({0, 1, 0, 1}), to_tensor({0, 0, 0, 0}));
  b.old_logp = example6_old();
  b.rollout_logp = at::zeros_like(b.old_logp);
  b.response_mask = at::ones({4, 4}, at::kBool);
  finalize(b);
  REQUIRE(kept_rows(compute_mismatch(b)) == std::vector<double>{1, 1, 0, 0});

  MismatchOptions o;
  ConfigReader r(parse_yaml("is_level: sequence\nis_cap: 3\nrs_level: turn_geo\nrs_upper: 1.01\nveto_threshold: 0",
                            "test"), "mismatch");
  read_options(r, o);
  r.finish();
  REQUIRE(o.is_level == MismatchLevel::sequence);
  REQUIRE(o.is_cap == 3);
  REQUIRE(o.rs_level == MismatchLevel::turn_geo);
  REQUIRE(o.rs_lower == Approx(1 / 1.01));
  REQUIRE(o.veto_threshold == 0);

  MismatchOptions bad;
  ConfigReader r2(parse_yaml("rs_level: geometrc", "test"), "mismatch");
  REQUIRE_THROWS_WITH(read_options(r2, bad), Catch::Contains("mismatch.rs_level"));
}

TEST_CASE("the CPU loops and the whole-tensor path give the same masks, weights and diagnostics", "[mismatch]") {
  at::manual_seed(9);
  const int64_t n = 30, len = 50;
  const torch::Tensor roll = -3 * at::rand({n, len});
  torch::Tensor old = roll + 0.002 * at::randn({n, len});
  old[4][7] = roll[4][7].item<float>() - 12;  // one vetoed row
  old.narrow(0, 10, 3).add_(0.05);            // one outlier trajectory (rows 9-11 share traj 3 with row 9)
  const torch::Tensor mask = at::rand({n, len}) < 0.7;
  const torch::Tensor traj = at::arange(n).div(3, "floor");
  for (MismatchLevel level : {MismatchLevel::off, MismatchLevel::token, MismatchLevel::turn, MismatchLevel::turn_geo,
                              MismatchLevel::sequence, MismatchLevel::geometric}) {
    INFO(to_string(level));
    const MismatchLevel rs = level == MismatchLevel::off ? MismatchLevel::geometric : level;
    const double band = (rs == MismatchLevel::turn || rs == MismatchLevel::sequence) ? 1.1 : 1.004;
    const auto o = MismatchOptions().with_is(level, 1.003).with_rs(rs, band);
    const MismatchResult f = compute_mismatch(old, roll, mask, traj, 10, o);
    const MismatchResult p = compute_mismatch(old, roll, mask, traj, 10, MismatchOptions(o).with_fused(false));
    REQUIRE(at::equal(f.response_mask, p.response_mask));
    REQUIRE(at::allclose(f.weights, p.weights, 1e-6, 1e-7));
    const auto fd = f.diagnostics.to_map(), pd = p.diagnostics.to_map();
    for (const auto& kv : pd) {
      INFO(kv.first);
      REQUIRE(fd.at(kv.first) == Approx(kv.second).epsilon(1e-4).margin(1e-6));
    }
    REQUIRE(fd.at("mismatch/vetoed_row_fraction") > 0);
  }
}
