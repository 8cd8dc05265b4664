// Advantage estimators: the worked examples of research §9, an independent scalar reference on
// random ragged batches, the properties TRLOO must have, and the bandit unbiasedness check.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>

#include "support/batches.h"
#include "turnrl/algo/advantage.h"
#include "turnrl/algo/returns.h"
#include "turnrl/core/error.h"

using namespace turnrl;
using turnrl::reference::Turn;
using turnrl::testing::random_rows;
using turnrl::testing::to_batch;
using turnrl::testing::to_tensor;
using turnrl::testing::to_vector;

namespace {

// Rows of one trajectory with 0-based turns.
void add_trajectory(std::vector<Turn>& rows, int64_t group, int64_t traj, std::vector<double> rewards,
                    std::vector<bool> valid = {}) {
  for (size_t t = 0; t < rewards.size(); ++t)
    rows.push_back({group, traj, int64_t(t), rewards[t], valid.empty() ? true : bool(valid[t])});
}

std::vector<double> run(const std::string& name, const TurnBatch& b, const AdvantageOptions& o = {},
                        const ReturnOptions& r = {}) {
  return to_vector(advantage_estimator(name)(b, compute_returns(b, r), o));
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("row " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(got[i] == Approx(want[i]).margin(tol));
  }
}

// Research §9, example 1: one group, n = 4, T = 3, all turns valid.
std::vector<Turn> example1() {
  std::vector<Turn> rows;
  add_trajectory(rows, 0, 0, {0.0, 1.0, 1.5});
  add_trajectory(rows, 0, 1, {1.0, 1.2, 1.2});
  add_trajectory(rows, 0, 2, {0.0, 0.0, 0.0});
  add_trajectory(rows, 0, 3, {0.0, 0.0, 2.0});
  return rows;
}

// Research §9, example 2: ragged trajectories and a masked turn (C's third turn).
std::vector<Turn> example2() {
  std::vector<Turn> rows;
  add_trajectory(rows, 0, 0, {1.0, 1.5, 2.0});
  add_trajectory(rows, 0, 1, {0.8, 1.0});
  add_trajectory(rows, 0, 2, {0.0, 1.2, 0.0}, {true, true, false});
  add_trajectory(rows, 0, 3, {0.0});
  return rows;
}

}  // namespace

TEST_CASE("worked example 1: TRLOO and multi-turn GRPO on a full group", "[advantage][worked]") {
  const TurnBatch b = to_batch(example1());
  require_close(run("trloo", b), {0.7, 1.033333, 0.433333, 1.9, 0.9, 0.033333, -2.633333, -2.3, -1.566667, 0.033333,
                                  0.366667, 1.1});
  require_close(run("dr_grpo", b), {0.525, 0.775, 0.325, 1.425, 0.675, 0.025, -1.975, -1.725, -1.175, 0.025, 0.275,
                                    0.825});
}

TEST_CASE("worked example 1: trajectory-level RLOO and GRPO on outcome returns", "[advantage][worked]") {
  const TurnBatch b = to_batch(example1());
  const ReturnOptions outcome = ReturnOptions().with_mode(ReturnMode::outcome);
  const auto rloo = run("rloo", b, {}, outcome);
  const auto grpo = run("grpo", b, AdvantageOptions().with_grouping(Grouping::trajectory), outcome);
  const std::vector<double> want_rloo = {0.433333, 0.033333, -1.566667, 1.1};
  const std::vector<double> want_grpo = {0.382353, 0.029412, -1.382351, 0.970587};
  for (int traj = 0; traj < 4; ++traj)
    for (int t = 0; t < 3; ++t) {
      REQUIRE(rloo[size_t(traj * 3 + t)] == Approx(want_rloo[size_t(traj)]).margin(1e-5));
      REQUIRE(grpo[size_t(traj * 3 + t)] == Approx(want_grpo[size_t(traj)]).margin(1e-5));
    }
}

TEST_CASE("worked example 2: ragged turns and a masked turn", "[advantage][worked]") {
  const TurnBatch b = to_batch(example2());
  // Rows: A t0 t1 t2, B t0 t1, C t0 t1 t2(masked), D t0.
  require_close(run("trloo", b), {3.5, 2.4, 2.0, -0.1, -1.35, -0.9, -1.05, 0.0, -2.5});
  require_close(run("dr_grpo", b), {2.625, 1.6, 2.0, -0.075, -0.9, -0.675, -0.7, 0.0, -1.875});
}

TEST_CASE("worked example 2: trajectory-level RLOO on outcome returns", "[advantage][worked]") {
  const TurnBatch b = to_batch(example2());
  const auto a = run("rloo", b, {}, ReturnOptions().with_mode(ReturnMode::outcome));
  // The reference's last-row values for A, B and D. C's last turn is masked: the reference then
  // zeroes C entirely (it copies the last row's masked advantage); turnrl keeps C's score (0) in
  // the baseline like the reference and gives C's valid turns their advantage, -1.
  require_close(a, {1.666667, 1.666667, 1.666667, 0.333333, 0.333333, -1.0, -1.0, 0.0, -1.0});
}

TEST_CASE("worked example 3: all-equal group and a group of one", "[advantage][worked]") {
  std::vector<Turn> rows;
  for (int i = 0; i < 3; ++i) add_trajectory(rows, 0, i, {1.0, 0.0});
  add_trajectory(rows, 1, 3, {0.7, 0.9});
  add_trajectory(rows, 1, 4, {0.3});
  const TurnBatch b = to_batch(rows);
  require_close(run("trloo", b), {0, 0, 0, 0, 0, 0, 1.3, 0.9, -1.3});
  require_close(run("dr_grpo", b), {0, 0, 0, 0, 0, 0, 0.65, 0.9, -0.65});
  // The documented option: a group of one gets no signal.
  const auto zero = AdvantageOptions().with_singleton(SingletonAdvantage::zero);
  require_close(run("trloo", b, zero), {0, 0, 0, 0, 0, 0, 1.3, 0.0, -1.3});
}

TEST_CASE("worked example 5: single-turn GRPO and RLOO small groups", "[advantage][worked]") {
  std::vector<Turn> rows;
  add_trajectory(rows, 0, 0, {1.0});
  add_trajectory(rows, 0, 1, {0.0});
  add_trajectory(rows, 1, 2, {0.7});
  const TurnBatch b = to_batch(rows);
  require_close(run("grpo", b), {0.7071058, -0.7071058, 0.6999993}, 1e-6);
  require_close(run("rloo", b), {1.0, -1.0, 0.7}, 1e-6);
  require_close(run("grpo", b, AdvantageOptions().with_singleton(SingletonAdvantage::zero)),
                {0.7071058, -0.7071058, 0.0}, 1e-6);
}

TEST_CASE("NaN or inf returns are rejected naming the row", "[advantage][edge]") {
  std::vector<Turn> rows;
  add_trajectory(rows, 0, 0, {1.0});
  add_trajectory(rows, 0, 1, {1.0});
  add_trajectory(rows, 0, 2, {0.0});
  const TurnBatch b = to_batch(rows);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& name : advantage_estimator_names()) {
    if (name == "gae") continue;
    INFO(name);
    REQUIRE_THROWS_WITH(advantage_estimator(name)(b, to_tensor({1.0, nan, 0.0}), {}), Catch::Contains("row 1"));
    REQUIRE_THROWS_WITH(advantage_estimator(name)(b, to_tensor({1.0, 0.0, INFINITY}), {}), Catch::Contains("row 2"));
  }
  // A non-finite return on a masked turn is ignored and cannot leak into the group.
  TurnBatch masked = b;
  masked.turn_mask = at::tensor(std::vector<int64_t>{1, 0, 1}).to(at::kBool);
  require_close(to_vector(trloo_advantage(masked, to_tensor({1.0, nan, 0.0}), {})), {1.0, 0.0, -1.0});
  // The batch itself rejects a NaN reward at construction.
  rows[1].reward = nan;
  REQUIRE_THROWS_WITH(to_batch(rows), Catch::Contains("TurnBatch.reward: row 1"));
}

TEST_CASE("returns tensor of the wrong shape is rejected", "[advantage][edge]") {
  const TurnBatch b = to_batch(example1());
  REQUIRE_THROWS_WITH(trloo_advantage(b, at::zeros({5}), {}), Catch::Contains("returns must be a [N] tensor"));
}

TEST_CASE("every estimator matches the scalar reference on random ragged batches", "[advantage][reference]") {
  const std::vector<std::string> names = {"trloo", "rloo", "grpo", "dr_grpo", "reinforce_pp", "reinforce"};
  struct Shape { int groups, n, turns; double mask; };
  const std::vector<Shape> shapes = {{1, 1, 1, 0.0}, {1, 2, 3, 0.3}, {3, 4, 3, 0.2}, {7, 8, 5, 0.25},
                                     {16, 16, 3, 0.1}, {5, 3, 1, 0.0}, {4, 16, 4, 0.5}};
  for (uint64_t seed = 1; seed <= 6; ++seed)
    for (const Shape& s : shapes)
      for (const auto dtype : {at::kFloat, at::kDouble})
        for (const bool trajectory : {false, true})
          for (const bool raw : {true, false}) {
            const auto rows = random_rows(seed * 131 + s.groups, s.groups, s.n, s.turns, s.mask);
            const TurnBatch b = to_batch(rows, dtype);
            const ReturnOptions ro = ReturnOptions().with_gamma(seed % 2 ? 1.0 : 0.9);
            const auto g_ref = reference::returns(rows, reference::Returns::reward_to_go, ro.gamma, true);
            const torch::Tensor g = compute_returns(b, ro);
            const double tol = dtype == at::kFloat ? 2e-5 : 1e-10;
            require_close(to_vector(g), g_ref, tol);
            const AdvantageOptions o = AdvantageOptions()
                                           .with_grouping(trajectory ? Grouping::trajectory : Grouping::turn)
                                           .with_singleton(raw ? SingletonAdvantage::raw_return : SingletonAdvantage::zero);
            for (const auto& name : names) {
              INFO("estimator " << name << ", seed " << seed << ", groups " << s.groups << "x" << s.n << "x" << s.turns
                                << (trajectory ? ", trajectory" : ", turn") << " grouping, dtype " << dtype);
              const auto want = reference::advantage(name, rows, g_ref, trajectory, raw, o.std_epsilon);
              // grpo divides by a std that can be small: compare relative to the scale.
              require_close(to_vector(advantage_estimator(name)(b, g, o)), want, name == "grpo" ? tol * 50 : tol * 5);
            }
          }
}

TEST_CASE("gae matches the scalar reference", "[advantage][reference]") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const auto rows = random_rows(seed, 4, 6, 4, 0.2);
    TurnBatch b = to_batch(rows, at::kDouble);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.5, 1.0);
    std::vector<double> values(rows.size());
    for (auto& v : values) v = normal(rng);
    b.values = to_tensor(values, at::kDouble);
    for (const bool whiten : {false, true}) {
      const auto o = AdvantageOptions().with_gamma(0.95).with_lambda(0.9).with_whiten(whiten);
      require_close(to_vector(gae_advantage(b, compute_returns(b), o)), reference::gae(rows, values, 0.95, 0.9, whiten),
                    1e-9);
    }
  }
  const TurnBatch no_values = to_batch(example1());
  REQUIRE_THROWS_WITH(gae_advantage(no_values, compute_returns(no_values), {}), Catch::Contains("TurnBatch.values"));
}

TEST_CASE("TRLOO properties", "[advantage][property]") {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const auto rows = random_rows(seed, 6, 8, 4, 0.3);
    const TurnBatch b = to_batch(rows, at::kDouble);
    const auto g = compute_returns(b);
    const auto a = to_vector(trloo_advantage(b, g, {}));

    SECTION("advantages of a (group, turn) with two or more members sum to zero") {
      std::map<std::pair<int64_t, int64_t>, std::pair<double, int>> sums;
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].valid) {
          auto& s = sums[{rows[i].group, rows[i].turn}];
          s.first += a[i], s.second += 1;
        }
      for (const auto& kv : sums)
        if (kv.second.second >= 2) REQUIRE(kv.second.first == Approx(0.0).margin(1e-9));
    }
    SECTION("for a group without masks TRLOO = N/(N-1) (G - mean)") {
      std::map<std::pair<int64_t, int64_t>, std::pair<double, int>> stats;
      const auto gv = to_vector(g);
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].valid) {
          auto& s = stats[{rows[i].group, rows[i].turn}];
          s.first += gv[i], s.second += 1;
        }
      for (size_t i = 0; i < rows.size(); ++i) {
        if (!rows[i].valid) continue;
        const auto& s = stats[{rows[i].group, rows[i].turn}];
        const double n = s.second;
        if (n >= 2) REQUIRE(a[i] == Approx(n / (n - 1) * (gv[i] - s.first / n)).margin(1e-9));
      }
    }
    SECTION("invariant to the order of rows") {
      std::vector<Turn> reversed(rows.rbegin(), rows.rend());
      const TurnBatch rb = to_batch(reversed, at::kDouble);
      const auto ra = to_vector(trloo_advantage(rb, compute_returns(rb), {}));
      for (size_t i = 0; i < rows.size(); ++i) REQUIRE(ra[rows.size() - 1 - i] == Approx(a[i]).margin(1e-12));
    }
    SECTION("masked turns get zero") {
      for (size_t i = 0; i < rows.size(); ++i)
        if (!rows[i].valid) REQUIRE(a[i] == 0.0);
    }
  }
}

TEST_CASE("TRLOO equals RLOO when every trajectory has one turn", "[advantage][property]") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const TurnBatch b = to_batch(random_rows(seed, 5, 6, 1, 0.0));
    const auto g = compute_returns(b);
    require_close(to_vector(trloo_advantage(b, g, {})), to_vector(rloo_advantage(b, g, {})), 1e-6);
  }
}

TEST_CASE("all-equal returns give zero advantage", "[advantage][property]") {
  std::vector<Turn> rows;
  for (int i = 0; i < 5; ++i) add_trajectory(rows, 0, i, {0.3, 0.3, 0.3});
  const TurnBatch b = to_batch(rows);
  for (const std::string name : {"trloo", "rloo", "grpo", "dr_grpo"}) {
    INFO(name);
    for (double v : run(name, b)) REQUIRE(v == Approx(0.0).margin(1e-6));
  }
  // reinforce_pp whitens over the whole batch: equal returns everywhere give zero.
  std::vector<Turn> single;
  for (int i = 0; i < 5; ++i) add_trajectory(single, i % 2, i, {0.3});
  for (double v : run("reinforce_pp", to_batch(single))) REQUIRE(v == Approx(0.0).margin(1e-6));
}

TEST_CASE("registry: names, unknown names and user estimators", "[advantage][registry]") {
  const auto names = advantage_estimator_names();
  for (const std::string n : {"dr_grpo", "gae", "grpo", "reinforce", "reinforce_pp", "rloo", "trloo"})
    REQUIRE(std::find(names.begin(), names.end(), n) != names.end());
  REQUIRE_THROWS_WITH(advantage_estimator("grpoo"),
                      Catch::Contains("advantage.estimator: unknown name 'grpoo'") && Catch::Contains("trloo"));
  register_advantage_estimator("double_return", [](const TurnBatch&, const torch::Tensor& g, const AdvantageOptions&) {
    return g * 2;
  });
  const TurnBatch b = to_batch(example1());
  REQUIRE(run("double_return", b)[0] == Approx(5.0));
  REQUIRE_THROWS_WITH(parse_singleton_advantage("none"), Catch::Contains("allowed: raw_return, zero"));
  REQUIRE_THROWS_WITH(parse_grouping("prompt"), Catch::Contains("allowed: turn, trajectory"));
}

// A K-armed bandit with a softmax policy: the exact policy gradient is sum_a pi_a r_a (e_a - pi).
// Each Monte-Carlo group draws N arms; the estimate is (1/N) sum_i A_i (e_{a_i} - pi). TRLOO's mean
// must match the exact gradient within its standard error; self-inclusive GRPO's is shrunk by
// (N-1)/N (and std-GRPO rescaled), so it must not.
TEST_CASE("bandit: TRLOO's policy gradient is unbiased, GRPO's is not", "[advantage][unbiased]") {
  const std::vector<double> theta = {0.5, -0.3, 0.1, 0.0};
  const std::vector<double> mean_reward = {1.0, 0.2, 0.5, 0.0};
  const int K = 4, N = 4, M = 40000;
  std::vector<double> pi(K);
  double z = 0;
  for (int a = 0; a < K; ++a) z += std::exp(theta[size_t(a)]);
  for (int a = 0; a < K; ++a) pi[size_t(a)] = std::exp(theta[size_t(a)]) / z;
  std::vector<double> exact(K, 0.0);
  for (int a = 0; a < K; ++a)
    for (int k = 0; k < K; ++k) exact[size_t(k)] += pi[size_t(a)] * mean_reward[size_t(a)] * ((a == k) - pi[size_t(k)]);

  std::mt19937_64 rng(2026);
  std::discrete_distribution<int> draw(pi.begin(), pi.end());
  std::normal_distribution<double> noise(0.0, 0.5);
  std::vector<Turn> rows;
  std::vector<int> arm;
  for (int m = 0; m < M; ++m)
    for (int i = 0; i < N; ++i) {
      const int a = draw(rng);
      arm.push_back(a);
      rows.push_back({m, int64_t(m) * N + i, 0, mean_reward[size_t(a)] + noise(rng), true});
    }
  const TurnBatch b = to_batch(rows, at::kDouble);
  const torch::Tensor g = compute_returns(b);

  // Per-group gradient estimates [M, K], then their mean and standard error per component.
  const auto estimate = [&](const std::string& name) {
    const auto adv = to_vector(advantage_estimator(name)(b, g, {}));
    std::vector<double> mean(K, 0.0), sq(K, 0.0);
    for (int m = 0; m < M; ++m) {
      std::vector<double> est(K, 0.0);
      for (int i = 0; i < N; ++i) {
        const size_t r = size_t(m * N + i);
        for (int k = 0; k < K; ++k) est[size_t(k)] += adv[r] * ((arm[r] == k) - pi[size_t(k)]) / N;
      }
      for (int k = 0; k < K; ++k) mean[size_t(k)] += est[size_t(k)] / M, sq[size_t(k)] += est[size_t(k)] * est[size_t(k)] / M;
    }
    std::vector<double> z_score(K);
    for (int k = 0; k < K; ++k) {
      const double se = std::sqrt((sq[size_t(k)] - mean[size_t(k)] * mean[size_t(k)]) / (M - 1));
      z_score[size_t(k)] = (mean[size_t(k)] - exact[size_t(k)]) / se;
    }
    return z_score;
  };
  for (double zk : estimate("trloo")) REQUIRE(std::abs(zk) < 4.0);
  for (const std::string biased : {"dr_grpo", "grpo"}) {
    double worst = 0;
    for (double zk : estimate(biased)) worst = std::max(worst, std::abs(zk));
    INFO(biased);
    REQUIRE(worst > 10.0);
  }
}

TEST_CASE("gae rejects a non-finite critic value naming the row", "[advantage][edge]") {
  std::vector<Turn> rows;
  add_trajectory(rows, 0, 0, {1.0, 0.5});
  TurnBatch b = to_batch(rows, at::kDouble);
  b.values = to_tensor({0.1, std::numeric_limits<double>::quiet_NaN()}, at::kDouble);
  REQUIRE_THROWS_WITH(gae_advantage(b, compute_returns(b), {}), Catch::Contains("the value of row 1"));
}
