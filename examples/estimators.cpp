// Computes TRLOO and multi-turn GRPO advantages on a small ragged batch (the paper's reference
// example: four samples of one prompt, up to three turns, one regression turn masked) and prints
// them side by side, showing GRPO's turn-dependent shrinkage (N-1)/N.
#include <cstdio>
#include <vector>

#include <torch/types.h>

#include "turnrl/algo/advantage.h"
#include "turnrl/algo/returns.h"

int main() {
  using namespace turnrl;
  // Rows: (group, trajectory, turn, reward, meaningful). Trajectory 2's third turn regresses to
  // reward 0 after a success, so it is masked out of training and of every baseline.
  struct Row { int64_t group, traj, turn; float reward; bool meaningful; };
  const std::vector<Row> rows = {{0, 0, 0, 1.0f, true}, {0, 0, 1, 1.5f, true}, {0, 0, 2, 2.0f, true},
                                 {0, 1, 0, 0.8f, true}, {0, 1, 1, 1.0f, true},
                                 {0, 2, 0, 0.0f, true}, {0, 2, 1, 1.2f, true}, {0, 2, 2, 0.0f, false},
                                 {0, 3, 0, 0.0f, true}};
  std::vector<int64_t> group, traj, turn;
  std::vector<float> reward;
  std::vector<uint8_t> mask;
  for (const Row& r : rows) {
    group.push_back(r.group), traj.push_back(r.traj), turn.push_back(r.turn), reward.push_back(r.reward);
    mask.push_back(r.meaningful);
  }
  const TurnBatch batch = make_turn_batch(at::tensor(group), at::tensor(traj), at::tensor(turn), at::tensor(reward),
                                          at::tensor(std::vector<int64_t>(mask.begin(), mask.end())).to(at::kBool));

  const torch::Tensor returns = compute_returns(batch);  // reward-to-go, gamma = 1 (the recipe)
  const torch::Tensor trloo = advantage_estimator("trloo")(batch, returns, {});
  const torch::Tensor grpo = advantage_estimator("dr_grpo")(batch, returns, {});  // the reference's multi-turn GRPO

  std::printf("traj turn  reward  return |   TRLOO    GRPO  GRPO/TRLOO\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const double t = trloo[int64_t(i)].item<double>(), g = grpo[int64_t(i)].item<double>();
    std::printf("%4lld %4lld %7.2f %7.2f | %7.3f %7.3f  %s\n", (long long)rows[i].traj, (long long)rows[i].turn,
                rows[i].reward, returns[int64_t(i)].item<double>(), t, g,
                !rows[i].meaningful ? "masked" : t != 0 ? std::to_string(g / t).substr(0, 5).c_str() : "-");
  }
  std::printf("\nTurn 0 has 4 samples (GRPO keeps 3/4 of TRLOO's signal), turn 1 has 3 (2/3), turn 2 has one:\n"
              "both give it its raw return. GRPO's mean includes the sample itself, so its gradient is shrunk\n"
              "by (N-1)/N with N varying per turn; TRLOO's leave-one-out baseline is unbiased.\n");
  return 0;
}
