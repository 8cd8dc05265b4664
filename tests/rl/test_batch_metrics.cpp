// verl/TRL-named batch statistics against plain loops over the rows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "support/batches.h"
#include "turnrl/core/error.h"
#include "turnrl/rl/batch_metrics.h"

using namespace turnrl;
using namespace turnrl::testing;

namespace {

// Response masks with the given lengths, L columns.
torch::Tensor response_mask(const std::vector<int64_t>& lengths, int64_t columns) {
  torch::Tensor m = torch::zeros({int64_t(lengths.size()), columns}, torch::kBool);
  for (size_t i = 0; i < lengths.size(); ++i) m[int64_t(i)].narrow(0, 0, lengths[i]).fill_(true);
  return m;
}

}  // namespace

TEST_CASE("rollout_batch_metrics: score, response length and zero-std groups by hand", "[trainer][batch_metrics]") {
  // group 0: traj 0 (turns 0, 1: last reward 1.0), traj 1 (turn 0: 1.0)  -> last rewards equal: zero std
  // group 1: traj 2 (turn 0: 0.5),           traj 3 (turns 0, 1: 0.0)    -> different
  // group 2: traj 4 alone (turn 0: 0.25)                                 -> one trajectory: zero std
  // Rows shuffled; traj 3's turn 1 is masked, so its last valid turn is turn 0 (reward 0.75).
  std::vector<reference::Turn> rows = {{1, 3, 1, 0.0, false}, {0, 0, 1, 1.0, true}, {1, 2, 0, 0.5, true},
                                       {0, 1, 0, 1.0, true},  {2, 4, 0, 0.25, true}, {0, 0, 0, 0.2, true},
                                       {1, 3, 0, 0.75, true}};
  TurnBatch b = to_batch(rows);
  b.response_mask = response_mask({4, 8, 3, 8, 1, 2, 5}, 8);
  const Metrics m = rollout_batch_metrics(b);
  // Valid rows: rewards 1.0, 0.5, 1.0, 0.25, 0.2, 0.75; lengths 8, 3, 8, 1, 2, 5.
  CHECK(m.at("critic/score/mean") == Approx((1.0 + 0.5 + 1.0 + 0.25 + 0.2 + 0.75) / 6));
  CHECK(m.at("critic/score/max") == Approx(1.0));
  CHECK(m.at("critic/score/min") == Approx(0.2));
  CHECK(m.at("critic/rewards/mean") == m.at("critic/score/mean"));
  CHECK(m.at("response_length/mean") == Approx((8 + 3 + 8 + 1 + 2 + 5) / 6.0));
  CHECK(m.at("response_length/max") == 8);
  CHECK(m.at("response_length/min") == 1);
  CHECK(m.at("response_length/clip_ratio") == Approx(2.0 / 6));
  CHECK(m.at("frac_reward_zero_std") == Approx(2.0 / 3));
}

TEST_CASE("frac_reward_zero_std matches a loop on random ragged batches", "[trainer][batch_metrics]") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::vector<reference::Turn> rows = random_rows(seed, 7, 3, 3, 0.2);
    TurnBatch b = to_batch(rows);
    b.response_mask = torch::ones({b.size(), 4}, torch::kBool);
    std::map<int64_t, std::pair<int64_t, double>> last;  // traj -> (turn, reward) of its last valid turn
    std::map<int64_t, int64_t> group_of;
    for (const auto& r : rows)
      if (r.valid && (!last.count(r.traj) || last[r.traj].first < r.turn)) last[r.traj] = {r.turn, r.reward}, group_of[r.traj] = r.group;
    std::map<int64_t, std::vector<double>> by_group;
    for (const auto& [traj, tr] : last) by_group[group_of[traj]].push_back(tr.second);
    double zero = 0;
    for (const auto& [g, v] : by_group) {
      double mean = 0, var = 0;
      for (double x : v) mean += x / double(v.size());
      for (double x : v) var += (x - mean) * (x - mean) / double(v.size());
      zero += v.size() < 2 || std::sqrt(var) < 1e-6;
    }
    CHECK(rollout_batch_metrics(b).at("frac_reward_zero_std") == Approx(zero / double(by_group.size())));
  }
}

TEST_CASE("advantage_metrics over valid turns only, and an empty batch gives nothing", "[trainer][batch_metrics]") {
  TurnBatch b = to_batch({{0, 0, 0, 1.0, true}, {0, 0, 1, 0.0, false}, {0, 1, 0, 0.0, true}});
  const Metrics m = advantage_metrics(b, to_tensor({2.0, 100.0, -1.0}), to_tensor({0.5, -100.0, -0.5}));
  CHECK(m.at("critic/advantages/mean") == Approx(0.0));
  CHECK(m.at("critic/advantages/min") == Approx(-0.5));
  CHECK(m.at("critic/returns/max") == Approx(2.0));
  CHECK(m.at("critic/returns/mean") == Approx(0.5));
  CHECK(rollout_batch_metrics(TurnBatch{}).empty());
}

TEST_CASE("advantage_metrics: per-turn group sizes count valid turns, by hand and against a loop", "[trainer][batch_metrics]") {
  // group 0: three trajectories reach turn 2, one of them masked there (a void turn) -> 3 at turn 1, 2 at turn 2
  // group 1: two trajectories, one stops after turn 1                                -> 2 at turn 1, 1 at turn 2
  // group 2: one trajectory of one turn                                             -> 1 at turn 1, none at turn 2
  TurnBatch b = to_batch({{0, 0, 0, 1.0, true}, {0, 0, 1, 0.0, false}, {0, 1, 0, 0.5, true}, {0, 1, 1, 1.0, true},
                          {0, 2, 0, 0.0, true}, {0, 2, 1, 2.0, true}, {1, 3, 0, 1.0, true}, {1, 3, 1, 1.5, true},
                          {1, 4, 0, 0.0, true}, {2, 5, 0, 0.5, true}});
  const torch::Tensor zeros = torch::zeros({b.size()});
  Metrics m = advantage_metrics(b, zeros, zeros);
  CHECK(m.at("adv/group_size/turn_1/mean") == Approx(2.0));
  CHECK(m.at("adv/group_size/turn_1/min") == 1);
  CHECK(m.at("adv/group_size/turn_1/max") == 3);
  CHECK(m.at("adv/group_size/turn_2/mean") == Approx(1.5));
  CHECK(m.at("adv/group_size/turn_2/min") == 1);
  CHECK(m.at("adv/group_size/turn_2/max") == 2);
  CHECK(m.count("adv/group_size/turn_3/mean") == 0);

  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::vector<reference::Turn> rows = random_rows(seed, 6, 5, 3, 0.3);
    b = to_batch(rows);
    std::map<std::pair<int64_t, int64_t>, int64_t> size;  // (turn, group) -> valid turns
    for (const auto& r : rows)
      if (r.valid) ++size[{r.turn, r.group}];
    std::map<int64_t, std::vector<double>> by_turn;
    for (const auto& [key, n] : size) by_turn[key.first].push_back(double(n));
    const torch::Tensor z = torch::zeros({b.size()});
    m = advantage_metrics(b, z, z);
    for (const auto& [turn, sizes] : by_turn) {
      const std::string name = "adv/group_size/turn_" + std::to_string(turn + 1);
      double mean = 0;
      for (double n : sizes) mean += n / double(sizes.size());
      CHECK(m.at(name + "/mean") == Approx(mean));
      CHECK(m.at(name + "/min") == *std::min_element(sizes.begin(), sizes.end()));
      CHECK(m.at(name + "/max") == *std::max_element(sizes.begin(), sizes.end()));
    }
  }
}

TEST_CASE("add_verl_metric_names copies the trainer's names to verl's", "[trainer][metrics]") {
  Metrics m = {{"actor/clip_frac", 0.1}, {"actor/approx_kl", 0.02}, {"optim/grad_norm", 3}, {"time/step_s", 9}};
  add_verl_metric_names(m);
  CHECK(m.at("actor/pg_clipfrac") == 0.1);
  CHECK(m.at("actor/ppo_kl") == 0.02);
  CHECK(m.at("actor/grad_norm") == 3);
  CHECK(m.at("timing_s/step") == 9);
  CHECK(m.at("actor/clip_frac") == 0.1);  // the turnrl name stays
  CHECK(m.count("actor/lr") == 0);        // only what was there
}
