// The smallest program a user writes against an installed turnrl: TRLOO advantages of a batch of
// two prompts with two single-turn samples each.
#include <cstdio>

#include <turnrl/algo/advantage.h>
#include <turnrl/algo/returns.h>

int main() {
  const turnrl::TurnBatch batch = turnrl::make_turn_batch(
      at::tensor({0L, 0L, 1L, 1L}), at::tensor({0L, 1L, 2L, 3L}), at::tensor({0L, 0L, 0L, 0L}),
      at::tensor({1.0f, 0.0f, 0.5f, 0.5f}));
  const torch::Tensor adv = turnrl::advantage_estimator("trloo")(batch, turnrl::compute_returns(batch), {});
  for (int64_t i = 0; i < adv.size(0); ++i) std::printf("%.2f ", adv[i].item<double>());
  std::printf("\n");
  return 0;
}
