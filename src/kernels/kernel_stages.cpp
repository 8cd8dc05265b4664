#include "turnrl/kernels/kernel_stages.h"

#include <cmath>
#include <map>

#include <fmt/format.h>

#include "turnrl/kernels/evaluator_health.h"

namespace turnrl {

PrsInputs prs_inputs(const std::vector<EvalResult>& results, CoverageSource source) {
  std::vector<double> coverage, speedup;
  std::vector<int64_t> correct;
  for (const EvalResult& r : results) {
    coverage.push_back(coverage_of(r, source));
    speedup.push_back(std::isfinite(r.speedup) ? r.speedup : 0.0);
    correct.push_back(classify(r) == RewardOutcome::correct);
  }
  return {at::tensor(coverage, at::kDouble), at::tensor(correct, at::kLong).to(at::kBool),
          at::tensor(speedup, at::kDouble)};
}

std::vector<EvalResult> kernel_evals(const RolloutBatch& r) {
  std::vector<EvalResult> out;
  out.reserve(r.payloads.size());
  for (const auto& p : r.payloads) out.push_back(kernel_verdict(p.get()).eval);
  return out;
}

Metrics kernel_rollout_metrics(const RolloutBatch& r, const std::vector<double>& fast_p) {
  Metrics m;
  const int64_t rows = r.batch.size();
  if (rows == 0) return m;
  const torch::Tensor traj = r.batch.traj.to(torch::kCPU).contiguous();
  const int64_t* tj = traj.data_ptr<int64_t>();
  std::map<int64_t, double> best_speedup;
  std::map<int64_t, bool> any_correct;
  double speedup_sum = 0, coverage_sum = 0;
  int64_t correct = 0;
  std::map<RewardOutcome, int64_t> outcomes;
  for (int64_t i = 0; i < rows; ++i) {
    const EvalResult& e = kernel_verdict(r.payloads[size_t(i)].get()).eval;
    const RewardOutcome o = classify(e);
    ++outcomes[o];
    if (!any_correct.count(tj[i])) best_speedup[tj[i]] = 0, any_correct[tj[i]] = false;
    if (o == RewardOutcome::correct) {
      ++correct;
      speedup_sum += e.speedup;
      coverage_sum += e.coverage;
      best_speedup[tj[i]] = std::max(best_speedup[tj[i]], e.speedup);
      any_correct[tj[i]] = true;
    }
  }
  m["kernel/correct"] = double(correct) / double(rows);
  m["kernel/speedup"] = correct ? speedup_sum / double(correct) : 0.0;
  m["kernel/coverage"] = correct ? coverage_sum / double(correct) : 0.0;
  for (RewardOutcome o : {RewardOutcome::format, RewardOutcome::compile, RewardOutcome::runtime, RewardOutcome::incorrect,
                          RewardOutcome::hacking})
    m[std::string("kernel/") + to_string(o)] = double(outcomes[o]);
  int64_t solved = 0;
  for (const auto& kv : any_correct) solved += kv.second;
  m["kernel/episode_correct"] = double(solved) / double(any_correct.size());
  std::vector<double> best;
  for (const auto& kv : best_speedup) best.push_back(kv.second);
  for (double p : fast_p) m[fmt::format("kernel/fast@{}", p)] = fast_at_p(best, p);
  return m;
}

Metrics KernelMetricsStage::apply(RolloutBatch& rollouts, const StageContext&) {
  return kernel_rollout_metrics(rollouts, fast_p_);
}

Metrics EvaluatorHealthStage::apply(RolloutBatch& rollouts, const StageContext& context) {
  require_evaluator_worked(kernel_evals(rollouts), fmt::format("step {}", context.step + 1));
  return {};
}

Metrics PrsStage::apply(RolloutBatch& r, const StageContext& context) {
  const PrsReport report = apply_prs(r.batch, prs_inputs(kernel_evals(r), options_.coverage_source), options_,
                                     stage_seed(context.seed, context.step, StageSeed::prs));
  return {{"prs/subject", double(report.subject)},
          {"prs/dropped", double(report.dropped)},
          {"prs/drop_rate", report.subject ? double(report.dropped) / double(report.subject) : 0.0}};
}

}  // namespace turnrl
