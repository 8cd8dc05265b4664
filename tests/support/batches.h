#pragma once
// Test helpers: TurnBatch from plain rows, random ragged batches, tensor <-> vector.
#include <algorithm>
#include <random>
#include <vector>

#include <torch/types.h>

#include "scalar_reference.h"
#include "turnrl/core/turn_batch.h"

namespace turnrl::testing {

inline torch::Tensor to_tensor(const std::vector<double>& v, at::ScalarType dtype = at::kFloat) {
  return at::tensor(v, at::kDouble).to(dtype);
}

inline std::vector<double> to_vector(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(at::kDouble).cpu().contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

inline TurnBatch to_batch(const std::vector<reference::Turn>& rows, at::ScalarType dtype = at::kFloat) {
  std::vector<int64_t> g, j, t;
  std::vector<double> r;
  std::vector<uint8_t> m;
  for (const auto& row : rows) {
    g.push_back(row.group), j.push_back(row.traj), t.push_back(row.turn), r.push_back(row.reward), m.push_back(row.valid);
  }
  TurnBatch b;
  b.group = at::tensor(g, at::kLong);
  b.traj = at::tensor(j, at::kLong);
  b.turn = at::tensor(t, at::kLong);
  b.reward = to_tensor(r, dtype);
  b.turn_mask = at::tensor(std::vector<int64_t>(m.begin(), m.end()), at::kLong).to(at::kBool);
  finalize(b);
  return b;
}

// `groups` prompts with `n` trajectories each of 1..max_turns turns (ragged), rewards uniform in
// [0, 2.5] rounded to 0.1 (ties happen), turns masked with probability mask_prob (turn 0 never,
// as in the reference), rows shuffled unless `shuffle` is false (then trajectory-major, the
// layout trainers produce).
inline std::vector<reference::Turn> random_rows(uint64_t seed, int groups, int n, int max_turns, double mask_prob,
                                                bool shuffle = true) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> turns(1, max_turns);
  std::uniform_int_distribution<int> reward(0, 25);
  std::bernoulli_distribution masked(mask_prob);
  std::vector<reference::Turn> rows;
  int64_t traj = 0;
  for (int g = 0; g < groups; ++g)
    for (int i = 0; i < n; ++i, ++traj) {
      const int k = turns(rng);
      for (int t = 0; t < k; ++t) rows.push_back({g, traj, t, reward(rng) / 10.0, t == 0 || !masked(rng)});
    }
  if (shuffle) std::shuffle(rows.begin(), rows.end(), rng);
  return rows;
}

}  // namespace turnrl::testing
