#pragma once
// Independent scalar references for the vectorised estimators: plain loops over rows in double
// precision, with std::map groups, written from the definitions in docs/algorithms.md and
// ../shared/research/drkernel-algorithms.md rather than from the tensor code. Tests compare
// against them; benchmarks time them as the baseline.
#include <cstdint>
#include <string>
#include <vector>

namespace turnrl::reference {

struct Turn {
  int64_t group = 0;
  int64_t traj = 0;
  int64_t turn = 0;
  double reward = 0.0;
  bool valid = true;  // turn_mask
};

enum class Returns { reward_to_go, outcome, residual };

std::vector<double> returns(const std::vector<Turn>& rows, Returns mode, double gamma, bool unbiased_shaping);

// Estimators by registry name: trloo, rloo, grpo, dr_grpo (both with turn or trajectory
// grouping), reinforce_pp, reinforce. `singleton_raw` selects A = G (true) or 0 for groups of one.
std::vector<double> advantage(const std::string& name, const std::vector<Turn>& rows, const std::vector<double>& g,
                              bool trajectory_grouping, bool singleton_raw, double std_epsilon);

// Turn-level GAE (values per row), optionally whitened over valid rows.
std::vector<double> gae(const std::vector<Turn>& rows, const std::vector<double>& values, double gamma, double lambda,
                        bool whiten);

}  // namespace turnrl::reference
