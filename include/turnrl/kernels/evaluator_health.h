#pragma once
// Telling "the candidates failed" from "the evaluator cannot evaluate". A run whose evaluator is
// broken (TMPDIR missing, no compiler, a dead worker pool) would otherwise train on a batch of
// internal errors and exit 0; these checks make that a run error, at start-up and at every step.
#include <string>
#include <vector>

#include "turnrl/kernels/evaluator.h"

namespace turnrl {

// Start-up probe: evaluates, on `task`, one candidate that is well-formed source defining nothing
// (kProbeCandidate). A working backend answers it with a fault of the candidate (compile, load,
// runtime, ...); an `internal` error means the evaluator itself cannot work, and throws
// turnrl::Error quoting the evaluator's message. Costs one compile.
void probe_evaluator(KernelEvaluator& evaluator, const std::string& task);

// The probe's candidate.
extern const char* const kProbeCandidate;

// Throws turnrl::Error when `results` is not empty and every one of them is an `internal` error
// (the evaluator's own failure, not a candidate's), naming `context` (e.g. "step 3"), the count and
// the first message. One working evaluation is enough to pass: a flaky worker is not a broken pool.
void require_evaluator_worked(const std::vector<EvalResult>& results, const std::string& context);

}  // namespace turnrl
