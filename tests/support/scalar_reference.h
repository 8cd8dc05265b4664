#pragma once
// Independent scalar references for the vectorised estimators: plain loops over rows in double
// precision, with std::map groups, written from the definitions in docs/algorithms.md and
// ../shared/research/drkernel-algorithms.md rather than from the tensor code. Tests compare
// against them; benchmarks time them as the baseline.
#include <cstdint>
#include <map>
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

// Mismatch correction (docs/algorithms.md, "Mismatch correction"). Levels by their YAML names:
// "off", "token", "turn", "turn_geo", "sequence", "geometric".
struct MismatchSpec {
  std::string is_level = "off", rs_level = "off", k3_level = "off";
  double is_cap = 2.0;
  double rs_lower = 0.0, rs_upper = 0.0;  // keep iff the rs_level ratio lies in [rs_lower, rs_upper]
  double k3_upper = 0.0;                  // keep iff the k3_level aggregate of k3 is <= k3_upper
  double veto_threshold = 0.0;            // 0: off
};

struct MismatchOutcome {
  std::vector<std::vector<bool>> keep;       // the new response mask
  std::vector<std::vector<double>> weights;  // TIS weight (1 with IS off) on kept tokens, 0 elsewhere
  std::map<std::string, double> diagnostics; // MismatchDiagnostics' fields by name
};

// old_logp, rollout_logp and mask are [N][L]; masked entries may hold anything (NaN, inf). traj
// holds each row's trajectory id, or is empty: every row is then its own trajectory.
MismatchOutcome mismatch(const std::vector<std::vector<double>>& old_logp,
                         const std::vector<std::vector<double>>& rollout_logp,
                         const std::vector<std::vector<bool>>& mask, const std::vector<int64_t>& traj,
                         const MismatchSpec& spec);

// A random multi-turn mismatch case: ragged rows (some empty), rollout log-probs in [-6, -0.1],
// trainer log-probs off by N(0, noise) per token, a few outlier rows (+0.05 on every token), one
// vetoed token (ratio e^-12), and masked entries holding NaN, ±inf and ±1e30. Every value is
// float-representable, so float and double tensors of it agree. `trajectories` ids spread over
// the rows: non-decreasing (the trainer's layout) when `sorted`, shuffled otherwise.
struct MismatchCase {
  std::vector<std::vector<double>> old_logp, rollout_logp;
  std::vector<std::vector<bool>> mask;
  std::vector<int64_t> traj;
};
MismatchCase random_mismatch_case(uint64_t seed, size_t rows, size_t len, size_t trajectories, bool sorted,
                                  double noise = 2e-3);

// The combinations the mismatch tests sweep on random_mismatch_case data (noise 2e-3): nothing;
// each level as ratio rejection with TIS at the same level (cap 1.003), as k3 rejection, and as
// k3 rejection on top of the recipe's geometric band with token TIS; the veto (1e-4) always on.
// Bands and k3 bounds are chosen to reject some but not all of the data.
std::vector<MismatchSpec> mismatch_sweep();

// "" when `got` has the same keep mask as `want`, weights within tol and diagnostics within a
// relative 1e-5; otherwise what differs first.
std::string mismatch_difference(const MismatchOutcome& got, const MismatchOutcome& want, double tol);

}  // namespace turnrl::reference
