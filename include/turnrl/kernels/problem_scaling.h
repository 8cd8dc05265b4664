#pragma once
// ProblemScaling: how a Python-backend evaluation scales with its problem's size (where outputs are
// compared, when a problem counts as large, how many timed calls fit a time budget). Its own header
// because both the evaluator's options (python_backend.h) and the YAML section
// (evaluator.python.scaling, backends.h) hold one.
#include <cstdint>

namespace turnrl {

// How one evaluation scales with its problem's size, for KernelBench problems with GB-scale inputs
// (docs/evaluator.md, "Large problems"). Inputs are always made on the evaluation device, once per
// trial, and the candidate gets the bytes the reference got.
struct ProblemScaling {
  // A call's outputs up to this many bytes travel whole to the parent and are compared there; larger
  // ones stay on the worker's device (the reference's under a one-time pad), are compared there, and
  // spot_checks elements per output at places drawn after the call are compared here as well.
  int64_t ship_bytes = int64_t(16) << 20;
  int spot_checks = 1024;
  // A problem whose first trial's inputs and outputs exceed this is large: its extra shape sets are
  // skipped (each would multiply a GB problem), its main correctness trials stop where the kept trials
  // would hold more than hold_fraction of the memory left after the first, and one timed call is checked.
  int64_t large_bytes = int64_t(256) << 20;
  double hold_fraction = 0.3;
  // Timed calls per side: as many as fit this budget, each costing the reference's measured call time
  // plus four passes over the trial's bytes at the device's measured copy bandwidth (the harness's
  // input copy, comparison, perturbation and poisoning), at least min_timed_calls and at most the
  // request's timing_trials.
  double timing_budget_seconds = 1.0;
  int min_timed_calls = 10;

  ProblemScaling& ship_up_to(int64_t bytes) { ship_bytes = bytes; return *this; }
  ProblemScaling& spots(int n) { spot_checks = n; return *this; }
  ProblemScaling& large_from(int64_t bytes) { large_bytes = bytes; return *this; }
  ProblemScaling& hold(double fraction) { hold_fraction = fraction; return *this; }
  ProblemScaling& timing_budget(double seconds) { timing_budget_seconds = seconds; return *this; }
  ProblemScaling& at_least_timed(int calls) { min_timed_calls = calls; return *this; }
};

}  // namespace turnrl
