#include "turnrl/rl/micro_batches.h"

#include <algorithm>
#include <numeric>

#include "turnrl/core/error.h"

namespace turnrl {
namespace {

struct RowSpan {
  int64_t first, end;  // [first, end): the row's valid tokens (column 0 alone when it has none)
};

std::vector<RowSpan> row_spans(const torch::Tensor& attention_mask) {
  const torch::Tensor valid = attention_mask.to(torch::kBool).cpu();
  const int64_t rows = valid.size(0), width = valid.size(1);
  const torch::Tensor any = valid.any(1).contiguous();
  const torch::Tensor columns = torch::arange(width, torch::kLong).unsqueeze(0).expand({rows, width});
  // First valid column: the minimum over valid columns (invalid ones count as `width`); last likewise.
  const torch::Tensor first = columns.masked_fill(~valid, width).amin(1).contiguous();
  const torch::Tensor last = columns.masked_fill(~valid, -1).amax(1).contiguous();
  std::vector<RowSpan> spans(size_t(rows), RowSpan{0, 1});
  for (int64_t r = 0; r < rows; ++r)
    if (any.data_ptr<bool>()[r]) spans[size_t(r)] = {first.data_ptr<int64_t>()[r], last.data_ptr<int64_t>()[r] + 1};
  return spans;
}

MicroBatch start_micro_batch(int64_t row, const RowSpan& span) { return MicroBatch{{row}, span.first, span.end}; }

// The micro-batch's columns after adding a row.
std::pair<int64_t, int64_t> widened(const MicroBatch& m, const RowSpan& span) {
  return {std::min(m.first_column, span.first), std::max(m.end_column, span.end)};
}

int64_t token_count(const torch::Tensor& mask) { return mask.sum().item<int64_t>(); }
int64_t nonempty_rows(const torch::Tensor& mask) { return mask.any(1).sum().item<int64_t>(); }

}  // namespace

std::vector<MicroBatch> plan_micro_batches(const torch::Tensor& attention_mask, const std::vector<int64_t>& order,
                                           int64_t max_rows, int64_t max_tokens) {
  if (max_rows < 1) fail("trainer.micro_batch_size: {} is out of range; allowed: >= 1", max_rows);
  if (max_tokens < 0) fail("trainer.micro_batch_tokens: {} is out of range; allowed: >= 0 (0 = no token budget)", max_tokens);
  if (attention_mask.dim() != 2) fail("plan_micro_batches: attention_mask must be [N, L]; got {}", c10::str(attention_mask.sizes()));
  const std::vector<RowSpan> spans = row_spans(attention_mask);
  for (int64_t row : order)
    if (row < 0 || row >= int64_t(spans.size()))
      fail("plan_micro_batches: row {} is outside the batch's {} rows", row, spans.size());
  std::vector<int64_t> rows = order;
  if (max_tokens > 0)  // longest first: rows of similar length share a micro-batch and its width
    std::stable_sort(rows.begin(), rows.end(), [&](int64_t a, int64_t b) {
      const RowSpan &x = spans[size_t(a)], &y = spans[size_t(b)];
      return x.end - x.first > y.end - y.first;
    });
  std::vector<MicroBatch> plan;
  for (int64_t row : rows) {
    const RowSpan& span = spans[size_t(row)];
    if (!plan.empty()) {
      MicroBatch& last = plan.back();
      const auto [first, end] = widened(last, span);
      const int64_t count = int64_t(last.rows.size()) + 1;
      if (count <= max_rows && (max_tokens == 0 || count * (end - first) <= max_tokens)) {
        last.rows.push_back(row);
        last.first_column = first;
        last.end_column = end;
        continue;
      }
    }
    plan.push_back(start_micro_batch(row, span));
  }
  return plan;
}

double split_loss_share(const torch::Tensor& part_mask, const torch::Tensor& whole_mask, LossAggMode mode) {
  switch (mode) {
    case LossAggMode::token_mean: {
      const int64_t whole = token_count(whole_mask);
      return whole > 0 ? double(token_count(part_mask)) / double(whole) : 0.0;
    }
    case LossAggMode::seq_mean_token_sum:
    case LossAggMode::seq_mean_token_mean: {
      const int64_t whole = nonempty_rows(whole_mask);
      return whole > 0 ? double(nonempty_rows(part_mask)) / double(whole) : 0.0;
    }
    case LossAggMode::seq_mean_token_sum_norm:
    case LossAggMode::seq_sum_no_norm: return 1.0;
  }
  fail("split_loss_share: unknown aggregation mode");
}

PPOLossOptions update_loss_options(const PPOLossOptions& options, int64_t whole_width) {
  PPOLossOptions out = options;
  if (out.norm_length == 0) out.norm_length = double(std::max<int64_t>(whole_width, 1));
  return out;
}

AccumulatedLoss accumulate_policy_gradient(Policy& policy, const UpdateRows& rows, const std::vector<MicroBatch>& plan,
                                           const PPOLossOptions& options, int rank, int world) {
  const PPOLossOptions loss_options = update_loss_options(options, rows.response_mask.size(1));
  const int64_t whole_tokens = token_count(rows.response_mask);
  const torch::Device device = rows.tokens.device();
  AccumulatedLoss out;
  for (size_t index = 0; index < plan.size(); ++index) {
    // Data parallel: micro-batches dealt round-robin; every share is of the whole batch, so the
    // ranks' gradients add up to the one-process gradient.
    if (int64_t(index) % world != rank) continue;
    const MicroBatch& micro = plan[index];
    const torch::Tensor sel = torch::tensor(micro.rows, torch::kLong).to(device);
    const auto cut = [&](const torch::Tensor& t) {
      return t.index_select(0, sel).narrow(1, micro.first_column, micro.width());
    };
    PolicyLossInputs in;
    in.response_mask = cut(rows.response_mask);
    const TokenLogp tl = policy.forward_logp(cut(rows.tokens), cut(rows.attention_mask), in.response_mask);
    in.logp = tl.logp;
    in.old_logp = cut(rows.old_logp);
    in.advantages = rows.advantages.dim() == 1 ? rows.advantages.index_select(0, sel) : cut(rows.advantages);
    if (rows.weights.defined()) in.weights = cut(rows.weights);
    in.entropy = tl.entropy;  // always: actor/entropy is logged even without an entropy bonus
    const PolicyLossResult res = policy_loss(in, loss_options);
    const double share = split_loss_share(in.response_mask, rows.response_mask, options.agg_mode);
    (res.loss * share).backward();
    out.loss += res.loss.item<double>() * share;
    const double token_share = whole_tokens > 0 ? double(token_count(in.response_mask)) / double(whole_tokens) : 0.0;
    for (const auto& [key, value] : res.metrics.to_map()) {
      if (key == "actor/ratio_max")
        out.metrics[key] = std::max(out.metrics.count(key) ? out.metrics[key] : 0.0, value);
      else
        out.metrics[key] += value * (key == "actor/pg_loss" || key == "actor/kl_loss" ? share : token_share);
    }
  }
  return out;
}

}  // namespace turnrl
