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

TEST_CASE("a planted outlier trajectory is rejected at sequence level, token level masks only its bad tokens",
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

TEST_CASE("masked tokens are ignored whatever their values, NaN on a valid token names the row", "[mismatch][edge]") {
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
                                              MismatchOptions().with_is(level, 2.0).with_rs(level, 0.5, 2.0).with_rs_k3(level, 0.5).with_fused(fused));
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

TEST_CASE("compute_mismatch reads a TurnBatch, options come from YAML", "[mismatch][config]") {
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

// --- k3 rejection, IcePop, bypass; every combination against the scalar reference -------------

namespace {

struct CaseTensors {
  torch::Tensor old, rollout, mask, traj;
};

CaseTensors tensors_of(const reference::MismatchCase& c, at::ScalarType dtype) {
  std::vector<std::vector<double>> mask;
  for (const auto& row : c.mask) mask.emplace_back(row.begin(), row.end());
  return {matrix(c.old_logp, dtype), matrix(c.rollout_logp, dtype), matrix(mask).to(at::kBool), ids(c.traj)};
}

MismatchOptions options_of(const reference::MismatchSpec& s) {
  return MismatchOptions().with_rs(parse_mismatch_level(s.rs_level), s.rs_lower, s.rs_upper)
      .with_rs_k3(parse_mismatch_level(s.k3_level), s.k3_upper).with_is(parse_mismatch_level(s.is_level), s.is_cap)
      .with_veto_threshold(s.veto_threshold);
}

reference::MismatchOutcome outcome_of(const MismatchResult& r) {
  reference::MismatchOutcome o;
  for (int64_t row = 0; row < r.weights.size(0); ++row) {
    const auto keep = to_vector(r.response_mask[row]);
    o.keep.emplace_back(keep.begin(), keep.end());
    o.weights.push_back(to_vector(r.weights[row]));
  }
  for (const auto& kv : r.diagnostics.to_map()) o.diagnostics[kv.first.substr(std::string("mismatch/").size())] = kv.second;
  return o;
}

}  // namespace

TEST_CASE("k3 rejection at every level equals hand-computed values", "[mismatch][k3]") {
  // lr per row: [0.1, -0.2], [0.01, 0], [0.3]; k3 = e^lr − lr − 1 per token:
  //   row 0: 0.0051709, 0.0187308 (Σ 0.0239017, mean 0.0119508)
  //   row 1: 0.0000502, 0         (Σ 0.0000502, mean 0.0000251)
  //   row 2: 0.0498588
  // trajectories {rows 0, 1} (Σ 0.0239518, mean over 4 tokens 0.0059880) and {row 2}.
  const torch::Tensor roll = matrix({{-1.0, -2.0}, {-1.0, -1.0}, {-2.0, -5.0}}, at::kDouble);
  const torch::Tensor old = roll + matrix({{0.1, -0.2}, {0.01, 0.0}, {0.3, 0.0}}, at::kDouble);
  const torch::Tensor mask = matrix({{1, 1}, {1, 1}, {1, 0}}).to(at::kBool);
  const torch::Tensor traj = ids({0, 0, 1});
  struct Case { MismatchLevel level; double upper; std::vector<double> keep; };
  const Case cases[] = {
      {MismatchLevel::token, 0.01, {1, 0, 1, 1, 0, 0}},
      {MismatchLevel::turn, 0.02, {0, 0, 1, 1, 0, 0}},
      {MismatchLevel::turn_geo, 0.02, {1, 1, 1, 1, 0, 0}},
      {MismatchLevel::sequence, 0.03, {1, 1, 1, 1, 0, 0}},
      {MismatchLevel::geometric, 0.006, {1, 1, 1, 1, 0, 0}},
      {MismatchLevel::geometric, 0.0059, {0, 0, 0, 0, 0, 0}},
  };
  for (const Case& c : cases)
    for (bool fused : {true, false}) {
      INFO(to_string(c.level) << " <= " << c.upper << " fused " << fused);
      const auto o = rs_off().with_rs_k3(c.level, c.upper).with_fused(fused);
      const MismatchResult r = compute_mismatch(old, roll, mask, traj, 2, o);
      REQUIRE(to_vector(r.response_mask) == c.keep);
      REQUIRE(to_vector(r.weights) == c.keep);  // IS off: the weights are the kept mask
    }
  REQUIRE_THROWS_WITH(compute_mismatch(old, roll, mask, traj, 2, rs_off().with_rs_k3(MismatchLevel::token, 0)),
                      Catch::Contains("mismatch.rs_k3_upper"));
}

TEST_CASE("every combination of rejection, k3 rejection, veto and TIS equals the scalar reference", "[mismatch][reference]") {
  for (const bool sorted : {true, false})
    for (const bool with_traj : {true, false}) {
      const auto c = reference::random_mismatch_case(sorted ? 21 : 22, 40, 24, 13, sorted);
      const CaseTensors t = tensors_of(c, at::kFloat);
      for (const reference::MismatchSpec& spec : reference::mismatch_sweep())
        for (const bool fused : {true, false}) {
          INFO("rs " << spec.rs_level << " k3 " << spec.k3_level << " is " << spec.is_level << " fused " << fused
                     << " sorted " << sorted << " traj " << with_traj);
          const MismatchResult r = compute_mismatch(t.old, t.rollout, t.mask, with_traj ? t.traj : torch::Tensor(), 13,
                                                    options_of(spec).with_fused(fused));
          const auto want = reference::mismatch(c.old_logp, c.rollout_logp, c.mask,
                                                with_traj ? c.traj : std::vector<int64_t>{}, spec);
          REQUIRE(reference::mismatch_difference(outcome_of(r), want, 1e-6) == "");
          // The sweep is not vacuous: rejection happens, but never of everything.
          if (spec.rs_level != "off" || spec.k3_level != "off")
            REQUIRE(want.diagnostics.at("rejected_row_fraction") > want.diagnostics.at("vetoed_row_fraction"));
          REQUIRE(want.diagnostics.at("rejected_token_fraction") < 0.9);
        }
    }
}

TEST_CASE("IcePop is token-level rejection with token TIS uncapped inside the band", "[mismatch][icepop]") {
  // verl's rollout_is: token with rollout_is_threshold "0.5_2.0": w = ρ inside [0.5, 2], 0 outside.
  const std::vector<double> lr = {-0.9, -0.3, 0.0, 0.4, 1.2};
  const torch::Tensor roll = at::full({1, 5}, -1.5, at::kDouble);
  const torch::Tensor old = roll + to_tensor(lr, at::kDouble).view({1, 5});
  const torch::Tensor mask = at::ones({1, 5}, at::kBool);
  const auto o = MismatchOptions().with_rs(MismatchLevel::token, 0.5, 2.0).with_is(MismatchLevel::token, 2.0).with_veto_threshold(0);
  const MismatchResult r = compute_mismatch(old, roll, mask, {}, 0, o);
  const auto w = to_vector(r.weights);
  for (size_t k = 0; k < lr.size(); ++k) {
    const double rho = std::exp(lr[k]);
    REQUIRE(w[k] == Approx(rho >= 0.5 && rho <= 2.0 ? rho : 0.0).epsilon(1e-12));
  }
  REQUIRE(to_vector(r.response_mask) == std::vector<double>{0, 1, 1, 1, 0});
}

TEST_CASE("bypass: old_logp is not read, nothing is rejected, every weight is exactly 1", "[mismatch][bypass]") {
  const auto c = reference::random_mismatch_case(7, 12, 9, 4, true);
  const CaseTensors t = tensors_of(c, at::kFloat);
  for (bool fused : {true, false}) {
    // The recipe's geometric band and veto stay in the struct; bypass overrides them.
    const MismatchResult r = compute_mismatch({}, t.rollout, t.mask, t.traj, 4,
                                              MismatchOptions().with_bypass(true).with_fused(fused));
    REQUIRE(at::equal(r.response_mask, t.mask));
    REQUIRE(at::equal(r.weights, t.mask.to(at::kFloat)));
    const auto d = r.diagnostics.to_map();
    for (const char* key : {"mismatch/rejected_token_fraction", "mismatch/rejected_row_fraction",
                            "mismatch/rejected_trajectory_fraction", "mismatch/vetoed_row_fraction", "mismatch/k3_kl",
                            "mismatch/mismatch_kl", "mismatch/log_ratio_abs_max", "mismatch/chi2_token"})
      REQUIRE(d.at(key) == 0);
    REQUIRE(d.at("mismatch/ess") == 1);
    REQUIRE(d.at("mismatch/training_ppl") == d.at("mismatch/rollout_ppl"));
  }
  TurnBatch b = make_turn_batch(ids({0, 0, 0, 0}), ids({0, 0, 1, 1}), ids({0, 1, 0, 1}), to_tensor({0, 0, 0, 0}));
  b.rollout_logp = example6_old();
  b.response_mask = at::ones({4, 4}, at::kBool);
  finalize(b);
  REQUIRE_THROWS_WITH(compute_mismatch(b), Catch::Contains("old_logp"));
  REQUIRE(at::equal(compute_mismatch(b, MismatchOptions().with_bypass(true)).weights, at::ones({4, 4})));
}

TEST_CASE("YAML: k3 rejection and bypass keys, corrections that bypass would ignore are errors", "[mismatch][config]") {
  const auto read = [](const std::string& yaml) {
    MismatchOptions o;
    ConfigReader r(parse_yaml(yaml, "test"), "mismatch");
    read_options(r, o);
    r.finish();
    return o;
  };
  const MismatchOptions k3 = read("rs_level: off\nrs_k3_level: geometric\nrs_k3_upper: 0.005");
  REQUIRE(k3.rs_k3_level == MismatchLevel::geometric);
  REQUIRE(k3.rs_k3_upper == 0.005);
  REQUIRE(k3.rs_level == MismatchLevel::off);
  REQUIRE(read("bypass: true").bypass);
  REQUIRE(read("bypass: true\nrs_level: off\nis_level: off\nveto_threshold: 0").bypass);
  REQUIRE_THROWS_WITH(read("bypass: true\nrs_level: geometric"),
                      Catch::Contains("mismatch.rs_level") && Catch::Contains("bypass") && Catch::Contains("allowed: off"));
  REQUIRE_THROWS_WITH(read("bypass: true\nrs_k3_level: token"), Catch::Contains("mismatch.rs_k3_level"));
  REQUIRE_THROWS_WITH(read("bypass: true\nveto_threshold: 0.001"), Catch::Contains("mismatch.veto_threshold"));
  REQUIRE_THROWS_WITH(read("rs_k3_level: mean"), Catch::Contains("mismatch.rs_k3_level") && Catch::Contains("geometric"));
  REQUIRE_THROWS_WITH(read("rs_k3_uper: 0.1"), Catch::Contains("rs_k3_uper"));
}

TEST_CASE("a traj id out of range names the row", "[mismatch][edge]") {
  const torch::Tensor old = example6_old();
  REQUIRE_THROWS_WITH(compute_mismatch(old, at::zeros_like(old), at::ones({4, 4}, at::kBool), ids({0, 0, 5, 1}), 2),
                      Catch::Contains("traj[2] = 5") && Catch::Contains("num_trajectories = 2"));
}
