#include "turnrl/kernels/evaluator_health.h"

#include <algorithm>

#include "turnrl/core/error.h"

namespace turnrl {

// Valid in every backend's language (C++, CUDA C++, Python treats '#' lines as comments) and
// defines no entry point, so a working evaluator gets as far as compiling or loading it.
const char* const kProbeCandidate = "# /* turnrl start-up probe: defines nothing */\n";

void probe_evaluator(KernelEvaluator& evaluator, const std::string& task) {
  EvalRequest probe;
  probe.task = task;
  probe.candidate = kProbeCandidate;
  probe.correctness_trials = 1;
  probe.timing_trials = 1;
  const std::vector<EvalResult> results = evaluator.evaluate({probe});
  if (results.size() != 1)
    fail("evaluator start-up check: 1 request gave {} results; the evaluator is broken", results.size());
  if (results[0].error == EvalError::internal)
    fail("evaluator start-up check on task '{}': the evaluator cannot evaluate (an internal error, before any "
         "candidate of the policy): {}",
         task, results[0].message);
}

void require_evaluator_worked(const std::vector<EvalResult>& results, const std::string& context) {
  if (results.empty()) return;
  const bool all_internal =
      std::all_of(results.begin(), results.end(), [](const EvalResult& r) { return r.error == EvalError::internal; });
  if (all_internal)
    fail("{}: all {} evaluations failed inside the evaluator (internal errors, not the candidates' faults), so the "
         "step has nothing to learn from; first: {}",
         context, results.size(), results[0].message);
}

}  // namespace turnrl
