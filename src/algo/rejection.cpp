#include "turnrl/algo/rejection.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/ranges.h>

#include "turnrl/algo/returns.h"
#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"
#include "turnrl/core/masked.h"
#include "turnrl/core/segment.h"

namespace turnrl {
namespace {

// Identical reward sequences within this (std of a cell's values) count as equal.
constexpr double kEqualTolerance = 1e-9;

void check_range(const char* field, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) fail("rejection.{}: {} is out of range; allowed: [{}, {}]", field, v, lo, hi);
}

void check_per_turn(const char* name, const torch::Tensor& t, int64_t n) {
  if (!t.defined() || t.dim() != 1 || t.size(0) != n)
    fail("{}: must be a [N] tensor with N = {} (one per turn); got {}", name, n,
         t.defined() ? fmt::format("{}", fmt::join(t.sizes(), "x")) : std::string("undefined"));
}

void require_response_mask(const TurnBatch& b, const char* step) {
  if (!b.response_mask.defined())
    fail("{}: TurnBatch.response_mask (bool [N, L]) is required: rejected turns are masked there", step);
}

// bool [N]: rows that still have at least one token to train on.
torch::Tensor rows_with_tokens(const TurnBatch& b) {
  return b.response_mask.defined() ? b.response_mask.any(1) : at::ones({b.size()}, b.group.options().dtype(at::kBool));
}

int64_t count(const torch::Tensor& flags) { return flags.sum().item<int64_t>(); }

// Turns whose turn_mask goes false: out of training and baselines, reward zeroed (NaN-safe).
void mask_turns(TurnBatch& b, const torch::Tensor& masked) {
  b.turn_mask = b.turn_mask_or_all() & ~masked;
  b.reward = masked_fill_zero(b.reward, b.turn_mask);
}

std::vector<int64_t> ids_where(const torch::Tensor& flags_cpu) {
  std::vector<int64_t> out;
  const bool* f = flags_cpu.data_ptr<bool>();
  for (int64_t g = 0; g < flags_cpu.numel(); ++g)
    if (f[g]) out.push_back(g);
  return out;
}

torch::Tensor cat_optional(const char* name, const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined())
    fail("concat_batches: TurnBatch.{} is defined in one batch only; define it in both or neither", name);
  if (!a.defined()) return a;
  if (a.dim() == 2 && a.size(1) != b.size(1))
    fail("concat_batches: TurnBatch.{} has {} columns in the first batch and {} in the second; pad both to one L",
         name, a.size(1), b.size(1));
  return at::cat({a, b.to(a.scalar_type())});
}

}  // namespace

// --- meaningful-turn mask -------------------------------------------------------------------

torch::Tensor meaningful_turns(const TurnBatch& b) {
  if (b.size() == 0) return at::ones({0}, b.group.options().dtype(at::kBool));
  const torch::Tensor positive = b.reward > 0;  // NaN compares false
  const torch::Tensor dense = to_dense_turns(b, positive.to(at::kLong));
  // An earlier positive turn exists where the exclusive prefix count is > 0.
  const torch::Tensor earlier_positive = from_dense_turns(b, dense.cumsum(1) - dense) > 0;
  return positive | ~earlier_positive;
}

TurnMaskReport apply_meaningful_turn_mask(TurnBatch& b) {
  TurnMaskReport report;
  report.masked_rows = b.turn_mask_or_all() & ~meaningful_turns(b);
  mask_turns(b, report.masked_rows);
  report.masked = count(report.masked_rows);
  return report;
}

// --- PRS ------------------------------------------------------------------------------------

void PrsOptions::validate() const {
  check_range("prs.threshold", threshold, 0, 1);
  check_range("prs.factor", factor, 0, 1);
  if (!(speedup_threshold >= -1 && speedup_threshold <= 1e6))
    fail("rejection.prs.speedup_threshold: {} is out of range; allowed: [0, 1e6], or -1 for off", speedup_threshold);
}

torch::Tensor prs_keep_probability(const TurnBatch& b, const PrsInputs& in, const PrsOptions& o) {
  o.validate();
  const int64_t n = b.size();
  check_per_turn("prs: PrsInputs.coverage", in.coverage, n);
  check_per_turn("prs: PrsInputs.correct", in.correct, n);
  const auto device = b.group.device();
  torch::Tensor c = in.coverage.to(device, at::kDouble);
  if (o.round_coverage) c = at::round(c * 100) / 100;
  if (o.level == PrsLevel::geometric && n > 0) {
    const torch::Tensor live = b.turn_mask_or_all() & rows_with_tokens(b);
    const torch::Tensor log_mean = segment_mean(at::log(c.clamp_min(1e-8)), b.traj, b.num_trajectories, live);
    c = gather_segments(log_mean, b.traj).exp();
  }
  torch::Tensor p = o.factor > 0 ? ((c - o.threshold) / o.factor).clamp(0, 1) : (c >= o.threshold).to(at::kDouble);
  if (o.speedup_threshold >= 0) {
    check_per_turn("prs: PrsInputs.speedup", in.speedup, n);
    p = at::maximum(p, (in.speedup.to(device, at::kDouble) >= o.speedup_threshold).to(at::kDouble));
  }
  return at::where(in.correct.to(device, at::kBool), p, at::ones_like(p));
}

PrsReport apply_prs(TurnBatch& b, const PrsInputs& in, const PrsOptions& o, at::Generator generator) {
  require_response_mask(b, "prs");
  PrsReport report;
  const int64_t n = b.size();
  if (!o.enabled) {
    report.keep_probability = at::ones({n}, b.group.options().dtype(at::kDouble));
    report.dropped_rows = at::zeros({n}, b.group.options().dtype(at::kBool));
    return report;
  }
  report.keep_probability = prs_keep_probability(b, in, o);
  const torch::Tensor uniform = at::rand({n}, generator, at::TensorOptions().dtype(at::kDouble)).to(b.group.device());
  const torch::Tensor keep = uniform < report.keep_probability;
  const torch::Tensor had_tokens = rows_with_tokens(b);
  const torch::Tensor subject = had_tokens & in.correct.to(b.group.device(), at::kBool);
  report.dropped_rows = had_tokens & ~keep;
  b.response_mask = b.response_mask & keep.unsqueeze(1);
  const torch::Tensor stats =
      at::stack({subject.to(at::kDouble).sum(), report.dropped_rows.to(at::kDouble).sum(),
                 masked_fill_zero(1 - report.keep_probability, subject).sum()})
          .cpu();
  report.subject = int64_t(stats[0].item<double>());
  report.dropped = int64_t(stats[1].item<double>());
  report.expected_dropped = stats[2].item<double>();
  return report;
}

PrsReport apply_prs(TurnBatch& b, const PrsInputs& in, const PrsOptions& o, uint64_t seed) {
  return apply_prs(b, in, o, at::detail::createCPUGenerator(seed));
}

// --- truncation -----------------------------------------------------------------------------

TruncationReport handle_truncation(TurnBatch& b, const torch::Tensor& truncated, TruncationHandling mode) {
  check_per_turn("truncation: truncated", truncated, b.size());
  TruncationReport report;
  const torch::Tensor flags = truncated.to(b.group.device(), at::kBool);
  report.truncated = count(flags);
  switch (mode) {
    case TruncationHandling::keep:
      report.affected_rows = at::zeros_like(flags);
      break;
    case TruncationHandling::reject_turn:
      require_response_mask(b, "truncation 'reject_turn'");
      report.affected_rows = flags & rows_with_tokens(b);
      b.response_mask = b.response_mask & ~flags.unsqueeze(1);
      break;
    case TruncationHandling::mask_trajectory: {
      const SegmentSums per_traj = segment_sums(flags.to(at::kDouble), b.traj, std::max<int64_t>(b.num_trajectories, 1));
      const torch::Tensor in_truncated_traj = gather_segments(per_traj.sum > 0, b.traj);
      report.affected_rows = in_truncated_traj & b.turn_mask_or_all();
      mask_turns(b, in_truncated_traj);
      break;
    }
  }
  report.affected = count(report.affected_rows);
  return report;
}

// --- group filters --------------------------------------------------------------------------

void GroupFilterOptions::validate() const {
  check_range("group_filter.min_last_turn_std", min_last_turn_std, 0, 1e6);
  if (min_group_size < 0) fail("rejection.group_filter.min_group_size: {} is negative; allowed: >= 0 (0: n/2 + 1)", min_group_size);
  if (group_size < 0) fail("rejection.group_filter.group_size: {} is negative; allowed: >= 0 (0: the largest group)", group_size);
  if (target_groups < 0) fail("rejection.group_filter.target_groups: {} is negative; allowed: >= 0 (0: no target)", target_groups);
  if (max_sampling_rounds < 1) fail("rejection.group_filter.max_sampling_rounds: {} is out of range; allowed: >= 1", max_sampling_rounds);
}

GroupFilterReport filter_groups(const TurnBatch& b, const GroupFilterOptions& o, at::Generator generator) {
  o.validate();
  GroupFilterReport report;
  const int64_t n_rows = b.size();
  if (n_rows == 0) {
    report.keep_rows = at::zeros({0}, b.group.options().dtype(at::kBool));
    report.enough = false;
    return report;
  }
  const int64_t groups = b.num_groups, turns = b.max_turns, trajs = b.num_trajectories;
  const auto dbl = b.group.options().dtype(at::kDouble);
  const torch::Tensor ones = at::ones({n_rows}, dbl);
  const torch::Tensor rewards = masked_turn_rewards(b).to(at::kDouble);

  // One row per trajectory: its last turn.
  const torch::Tensor traj_len = segment_sums(ones, b.traj, trajs).count;
  const torch::Tensor is_last = b.turn == traj_len.index_select(0, b.traj).to(at::kLong) - 1;
  const torch::Tensor group_n = segment_sums(ones, b.group, groups, is_last).count;
  const torch::Tensor present = group_n > 0;

  torch::Tensor low_std = at::zeros({groups}, dbl.dtype(at::kBool));
  if (o.min_last_turn_std > 0)  // a singleton's std is NaN: not "low", as in the reference
    low_std = present & (segment_std(rewards, b.group, groups, /*unbiased=*/true, is_last) < o.min_last_turn_std);

  torch::Tensor all_equal = at::zeros_like(low_std);
  if (o.drop_all_equal) {
    // Cells (group, turn position) over the dense [trajectories, turns] view: a group is all
    // equal when, in every cell, the trajectories agree on the reward and on whether the turn
    // exists and is unmasked.
    const torch::Tensor reward_cells = to_dense_turns(b, rewards).reshape(-1);
    const torch::Tensor live_cells = to_dense_turns(b, b.turn_mask_or_all().to(at::kDouble)).reshape(-1);
    const torch::Tensor traj_group = at::zeros({trajs}, b.group.options()).index_copy_(0, b.traj, b.group);
    const torch::Tensor cell_key =
        (traj_group.unsqueeze(1) * turns + at::arange(turns, b.group.options()).unsqueeze(0)).reshape(-1);
    const torch::Tensor cell_mask = (traj_len > 0).unsqueeze(1).expand({trajs, turns}).reshape(-1);
    const int64_t cells = groups * turns;
    const torch::Tensor varies =
        ((segment_std(reward_cells, cell_key, cells, false, cell_mask) > kEqualTolerance) |
         (segment_std(live_cells, cell_key, cells, false, cell_mask) > kEqualTolerance))
            .view({groups, turns})
            .any(1);
    all_equal = present & ~low_std & ~varies;
  }

  const torch::Tensor host_n = group_n.to(at::kLong).cpu();
  const int64_t n = o.group_size > 0 ? o.group_size : host_n.max().item<int64_t>();
  const int64_t min_size = o.min_group_size > 0 ? o.min_group_size : n / 2 + 1;
  const torch::Tensor too_small = present & ~low_std & ~all_equal & (group_n < double(min_size));
  const torch::Tensor survivors = present & ~low_std & ~all_equal & ~too_small;

  const torch::Tensor flags = at::stack({low_std, all_equal, too_small, survivors}).cpu();
  report.low_std = ids_where(flags[0]);
  report.all_equal = ids_where(flags[1]);
  report.too_small = ids_where(flags[2]);
  std::vector<int64_t> candidates = ids_where(flags[3]);

  const int64_t* sizes = host_n.data_ptr<int64_t>();
  if (o.target_groups > 0 && int64_t(candidates.size()) > o.target_groups) {
    // Complete groups first, then the others, each in a seeded random order (the reference's
    // randperm on a generator seeded with 1).
    const torch::Tensor perm = at::randperm(groups, generator, at::TensorOptions().dtype(at::kLong));
    std::vector<int64_t> rank(groups);
    const int64_t* p = perm.data_ptr<int64_t>();
    for (int64_t i = 0; i < groups; ++i) rank[p[i]] = i;
    std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t x, int64_t y) {
      const bool cx = sizes[x] >= n, cy = sizes[y] >= n;
      return cx != cy ? cx : rank[x] < rank[y];
    });
    report.over_target.assign(candidates.begin() + o.target_groups, candidates.end());
    candidates.resize(o.target_groups);
    std::sort(report.over_target.begin(), report.over_target.end());
  }
  std::sort(candidates.begin(), candidates.end());
  report.kept = candidates;
  for (int64_t g : report.kept) report.kept_trajectories += sizes[g];
  report.needed_trajectories = o.target_groups * n;
  report.enough = !report.kept.empty() && report.kept_trajectories >= report.needed_trajectories;

  torch::Tensor kept_flag = at::zeros({groups}, at::kBool);
  if (!report.kept.empty()) kept_flag.index_fill_(0, at::tensor(report.kept, at::kLong), true);
  report.keep_rows = kept_flag.to(b.group.device()).index_select(0, b.group);
  return report;
}

GroupCarryOver::GroupCarryOver(GroupFilterOptions options)
    : options_(std::move(options)), generator_(at::detail::createCPUGenerator(options_.seed)) {
  options_.validate();
}

TurnBatch GroupCarryOver::merge(const TurnBatch& batch) {
  TurnBatch merged = concat_batches(stash_, batch);
  stash_ = TurnBatch();
  stashed_groups_ = 0;
  return merged;
}

GroupCarryOver::Selection GroupCarryOver::select(const TurnBatch& batch) {
  Selection s;
  s.report = filter_groups(batch, options_, generator_);
  // Only the groups selected for training are carried over; valid groups beyond the target are
  // discarded, as in the reference.
  TurnBatch kept = select_rows(batch, s.report.keep_rows);
  s.train = s.report.enough;
  if (s.train)
    s.batch = std::move(kept);
  else
    stash_ = std::move(kept), stashed_groups_ = int64_t(s.report.kept.size());
  return s;
}

DynamicSamplingResult dynamic_sampling(const std::function<TurnBatch(int)>& sample, const GroupFilterOptions& options) {
  options.validate();
  GroupFilterOptions per_round = options;
  per_round.target_groups = 0;
  at::Generator generator = at::detail::createCPUGenerator(options.seed);
  DynamicSamplingResult result;
  const int64_t target = options.target_groups;
  while (result.rounds < options.max_sampling_rounds && (target == 0 ? result.rounds == 0 : result.informative_groups < target)) {
    const TurnBatch round = sample(result.rounds);
    GroupFilterReport report = filter_groups(round, per_round, generator);
    result.informative_groups += int64_t(report.kept.size());
    result.batch = concat_batches(result.batch, select_rows(round, report.keep_rows));
    result.reports.push_back(std::move(report));
    ++result.rounds;
  }
  result.enough = target > 0 ? result.informative_groups >= target : result.informative_groups > 0;
  if (target > 0 && result.informative_groups > target) {
    // Arrival order = ascending id after concatenation: keep the first `target` groups.
    const torch::Tensor ids = std::get<0>(at::unique_consecutive(std::get<0>(result.batch.group.cpu().sort())));
    const int64_t last_kept = ids[target - 1].item<int64_t>();
    result.batch = select_rows(result.batch, result.batch.group <= last_kept);
  }
  return result;
}

// --- batch plumbing -------------------------------------------------------------------------

TurnBatch select_rows(const TurnBatch& b, const torch::Tensor& keep) {
  check_per_turn("select_rows: keep", keep, b.size());
  const torch::Tensor rows = keep.to(b.group.device(), at::kBool).nonzero().view(-1);
  const auto take = [&](const torch::Tensor& t) { return t.defined() ? t.index_select(0, rows) : t; };
  TurnBatch out;
  out.group = take(b.group), out.traj = take(b.traj), out.turn = take(b.turn), out.reward = take(b.reward);
  out.turn_mask = take(b.turn_mask), out.tokens = take(b.tokens), out.response_mask = take(b.response_mask);
  out.rollout_logp = take(b.rollout_logp), out.old_logp = take(b.old_logp), out.ref_logp = take(b.ref_logp);
  out.attention_mask = take(b.attention_mask);
  out.values = take(b.values);
  finalize(out, ValidateOptions().allow_nonfinite_masked(true));
  return out;
}

TurnBatch concat_batches(const TurnBatch& first, const TurnBatch& second) {
  if (first.size() == 0) return second;
  if (second.size() == 0) return first;
  TurnBatch out;
  out.group = at::cat({first.group, second.group + first.num_groups});
  out.traj = at::cat({first.traj, second.traj + first.num_trajectories});
  out.turn = at::cat({first.turn, second.turn});
  out.reward = at::cat({first.reward, second.reward.to(first.reward.scalar_type())});
  if (first.turn_mask.defined() || second.turn_mask.defined())
    out.turn_mask = at::cat({first.turn_mask_or_all(), second.turn_mask_or_all()});
  out.tokens = cat_optional("tokens", first.tokens, second.tokens);
  out.response_mask = cat_optional("response_mask", first.response_mask, second.response_mask);
  out.rollout_logp = cat_optional("rollout_logp", first.rollout_logp, second.rollout_logp);
  out.attention_mask = cat_optional("attention_mask", first.attention_mask, second.attention_mask);
  out.old_logp = cat_optional("old_logp", first.old_logp, second.old_logp);
  out.ref_logp = cat_optional("ref_logp", first.ref_logp, second.ref_logp);
  out.values = cat_optional("values", first.values, second.values);
  finalize(out, ValidateOptions().allow_nonfinite_masked(true));
  return out;
}

// --- options --------------------------------------------------------------------------------

template <typename V>
static void describe(V& v, RejectionOptions& o) {
  v.flag("mask_void_turns", o.mask_void_turns, "mask turns with reward <= 0 after a success");
  v.choice("truncation", o.truncation, {"keep", "reject_turn", "mask_trajectory"}, parse_truncation_handling,
           "keep | reject_turn | mask_trajectory");
  v.section("prs", "profiling-based rejection sampling", [&](auto& p) {
    p.flag("enabled", o.prs.enabled, "PRS on/off");
    p.choice("level", o.prs.level, {"turn", "geometric"}, parse_prs_level, "turn | geometric");
    p.number("threshold", o.prs.threshold, 0, 1, "p_keep = clamp((c - threshold) / factor, 0, 1); [0, 1]");
    p.number("factor", o.prs.factor, 0, 1, "[0, 1]; 0 = a step at threshold");
    p.number("speedup_threshold", o.prs.speedup_threshold, -1, 1e6, "also keep when speedup >= this; -1 = off");
    p.flag("round_coverage", o.prs.round_coverage, "round coverage to 2 decimals first");
    p.choice("coverage_source", o.prs.coverage_source, {"true_share", "reference", "kernel_count"},
             parse_coverage_source, "true_share | reference | kernel_count");
  });
  v.section("group_filter", "whole-group filters before the advantage", [&](auto& g) {
    g.number("min_last_turn_std", o.groups.min_last_turn_std, 0, 1e6,
             "drop groups whose last-turn reward std is below; 0 = off");
    g.flag("drop_all_equal", o.groups.drop_all_equal, "drop groups with identical reward sequences");
    g.integer("min_group_size", o.groups.min_group_size, 0, 1 << 20, "0 = n/2 + 1");
    g.integer("group_size", o.groups.group_size, 0, 1 << 20, "n; 0 = the largest group");
    g.integer("target_groups", o.groups.target_groups, 0, 1 << 20, "the built-in trainer needs 0 (train on every survivor)");
    g.integer("max_sampling_rounds", o.groups.max_sampling_rounds, 1, 1 << 20, ">= 1");
    g.integer("seed", o.groups.seed, 0, INT64_MAX, "selection seed");
  });
}

void read_options(ConfigReader& r, RejectionOptions& o) {
  read_described(r, o);
  o.prs.validate();
  o.groups.validate();
}

void write_options(ConfigWriter& w, const RejectionOptions& o) { write_described(w, o); }

const char* to_string(PrsLevel v) { return v == PrsLevel::turn ? "turn" : "geometric"; }

const char* to_string(TruncationHandling v) {
  switch (v) {
    case TruncationHandling::keep: return "keep";
    case TruncationHandling::reject_turn: return "reject_turn";
    case TruncationHandling::mask_trajectory: return "mask_trajectory";
  }
  return "?";
}

PrsLevel parse_prs_level(const std::string& name, const std::string& field) {
  if (name == "turn") return PrsLevel::turn;
  if (name == "geometric") return PrsLevel::geometric;
  fail("{}: unknown value '{}'; allowed: turn, geometric", field, name);
}

TruncationHandling parse_truncation_handling(const std::string& name, const std::string& field) {
  for (TruncationHandling v : {TruncationHandling::keep, TruncationHandling::reject_turn, TruncationHandling::mask_trajectory})
    if (name == to_string(v)) return v;
  fail("{}: unknown value '{}'; allowed: keep, reject_turn, mask_trajectory", field, name);
}

}  // namespace turnrl
