// Micro-batches of the policy update: the plan (token budget, length buckets, column cuts), the
// loss share that keeps the aggregation of the whole batch, and the accumulated gradient against
// one whole-batch backward under every aggregation mode.
#include <catch2/catch.hpp>

#include <torch/csrc/autograd/autograd.h>

#include "model/hf_fixtures.h"
#include "turnrl/core/error.h"
#include "turnrl/rl/micro_batches.h"

using namespace turnrl;
using namespace turnrl::test;

namespace {

const LossAggMode kModes[] = {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum,
                              LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm,
                              LossAggMode::seq_sum_no_norm};

// Rows valid on [first, end) of `width` columns.
torch::Tensor spans_mask(const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t width) {
  torch::Tensor mask = torch::zeros({int64_t(spans.size()), width}, torch::kBool);
  for (size_t r = 0; r < spans.size(); ++r) mask[int64_t(r)].slice(0, spans[r].first, spans[r].second).fill_(true);
  return mask;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST_CASE("micro_batches: without a token budget, consecutive rows of the order, cut to their columns", "[trainer]") {
  const torch::Tensor mask = spans_mask({{0, 3}, {2, 7}, {0, 5}, {1, 2}, {0, 0}}, 8);
  const std::vector<MicroBatch> plan = plan_micro_batches(mask, {4, 0, 1, 2, 3}, 2);
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].rows == std::vector<int64_t>{4, 0});
  CHECK((plan[0].first_column == 0 && plan[0].end_column == 3));  // the empty row spans column 0 alone
  CHECK(plan[1].rows == std::vector<int64_t>{1, 2});
  CHECK((plan[1].first_column == 0 && plan[1].end_column == 7));
  CHECK(plan[2].rows == std::vector<int64_t>{3});
  CHECK((plan[2].first_column == 1 && plan[2].end_column == 2));
}

TEST_CASE("micro_batches: a token budget buckets rows by length, longest first", "[trainer]") {
  // Spans 8, 2, 6, 3, 7, 2 (the last left-padded, on [4, 6)); budget 18 tokens, at most 3 rows.
  const torch::Tensor mask = spans_mask({{0, 8}, {0, 2}, {0, 6}, {0, 3}, {0, 7}, {4, 6}}, 8);
  const std::vector<MicroBatch> plan = plan_micro_batches(mask, iota(6), 3, 18);
  // Longest first: 0 (8), 4 (7), 2 (6), 3 (3), 1 (2), 5 (2). {0, 4}: 2 x 8 = 16; + 2: 3 x 8 = 24
  // > 18, so 2 starts anew; {2, 3, 1}: 3 x 6 = 18; 5 would make 4 rows, so it goes alone.
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].rows == std::vector<int64_t>{0, 4});
  CHECK(plan[0].width() == 8);
  CHECK(plan[1].rows == std::vector<int64_t>{2, 3, 1});
  CHECK((plan[1].first_column == 0 && plan[1].end_column == 6));
  CHECK(plan[2].rows == std::vector<int64_t>{5});
  CHECK((plan[2].first_column == 4 && plan[2].end_column == 6));
  // A row longer than the budget goes alone rather than failing.
  CHECK(plan_micro_batches(mask, iota(6), 8, 2).size() == 6);
}

TEST_CASE("micro_batches: bad sizes are errors naming the key", "[trainer]") {
  const torch::Tensor mask = torch::ones({2, 3}, torch::kBool);
  CHECK_THROWS_WITH(plan_micro_batches(mask, iota(2), 0), Catch::Contains("trainer.micro_batch_size: 0"));
  CHECK_THROWS_WITH(plan_micro_batches(mask, iota(2), 1, -5), Catch::Contains("trainer.micro_batch_tokens: -5"));
  CHECK_THROWS_WITH(plan_micro_batches(mask, {0, 2}, 1), Catch::Contains("row 2"));
}

TEST_CASE("micro_batches: the shares make any split aggregate to the whole batch", "[trainer]") {
  torch::manual_seed(31);
  const torch::Tensor values = torch::randn({7, 9}, torch::kDouble);
  torch::Tensor mask = torch::rand({7, 9}) < 0.5;
  mask[3].fill_(false);              // an empty row counts nowhere
  mask.select(1, 0).fill_(false);    // so every part can be cut to columns [1, 9)
  const std::vector<std::vector<int64_t>> parts = {{0, 5}, {1, 2, 3}, {4}, {6}};
  const double pinned = update_loss_options(PPOLossOptions(), 9).norm_length;
  CHECK(pinned == 9);
  for (const LossAggMode mode : kModes) {
    INFO(to_string(mode));
    double sum = 0;
    for (const auto& part : parts) {
      const torch::Tensor rows = torch::tensor(part, torch::kLong);
      const torch::Tensor part_values = values.index_select(0, rows).narrow(1, 1, 8);
      const torch::Tensor part_mask = mask.index_select(0, rows).narrow(1, 1, 8);
      sum += split_loss_share(part_mask, mask, mode) * aggregate_loss(part_values, part_mask, mode, pinned).item<double>();
    }
    CHECK(sum == Approx(aggregate_loss(values, mask, mode).item<double>()).epsilon(1e-12));
  }
}

TEST_CASE("micro_batches: the accumulated gradient equals one whole-batch backward under every mode", "[trainer]") {
  auto policy = load_fixture("qwen3");
  const int64_t vocab = policy->config().vocab_size, rows = 6, width = 12;
  torch::manual_seed(32);
  UpdateRows u;
  u.tokens = torch::randint(vocab, {rows, width}, torch::kLong);
  // Ragged lengths: right padding, one left-padded row.
  u.attention_mask = spans_mask({{0, 12}, {0, 5}, {0, 9}, {3, 12}, {0, 4}, {0, 7}}, width);
  u.response_mask = u.attention_mask & (torch::rand({rows, width}) < 0.7);
  u.response_mask.select(1, 0).fill_(false);
  u.old_logp = -torch::rand({rows, width}) * 3;
  u.advantages = torch::randn({rows});
  u.weights = torch::rand({rows, width}) + 0.5;
  const std::vector<torch::Tensor> params = policy->parameters();
  for (const LossAggMode mode : kModes) {
    INFO(to_string(mode));
    const PPOLossOptions options = PPOLossOptions().with_agg_mode(mode).with_entropy_coef(0.01).with_loss_scale_factor(1);
    // Reference: the whole padded batch in one forward and one backward, the policy loss as is.
    PolicyLossInputs in;
    const TokenLogp whole = policy->forward_logp(u.tokens, u.attention_mask, u.response_mask);
    in.logp = whole.logp;
    in.entropy = whole.entropy;
    in.old_logp = u.old_logp;
    in.advantages = u.advantages;
    in.response_mask = u.response_mask;
    in.weights = u.weights;
    const torch::Tensor loss = policy_loss(in, options).loss;
    const auto reference = torch::autograd::grad({loss}, params);

    for (const int64_t budget : {int64_t(0), int64_t(20), int64_t(30)}) {
      INFO("micro_batch_tokens " << budget);
      const std::vector<MicroBatch> plan = plan_micro_batches(u.attention_mask, {5, 2, 0, 4, 1, 3}, 4, budget);
      if (budget > 0) CHECK(plan.size() >= 3);
      for (auto& p : params) p.mutable_grad() = torch::Tensor();
      const AccumulatedLoss acc = accumulate_policy_gradient(*policy, u, plan, options);
      CHECK(acc.loss == Approx(loss.item<double>()).epsilon(1e-5));
      double worst = 0, scale = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        REQUIRE(params[i].grad().defined());
        worst = std::max(worst, max_abs_diff(params[i].grad(), reference[i]));
        scale = std::max(scale, reference[i].abs().max().item<double>());
      }
      CHECK(scale > 0);
      CHECK(worst <= 1e-5 * scale);
    }
  }
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
}
