#pragma once
// The kernel evaluator's seam: a batch of EvalRequests in, one EvalResult each (same order) out.
// Backends (cpu, cuda, python) implement KernelEvaluator; the pipeline stages are
// extract -> compile -> load -> correctness -> timing -> profiling -> hacking checks.
// No LibTorch in this header: results are plain values that rewards, environments and logs read.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace turnrl {

// The last pipeline stage a candidate completed.
enum class EvalStage {
  none,       // nothing usable (e.g. no code block found)
  extracted,  // candidate source found
  compiled,
  loaded,
  ran,        // ran without crashing, output not (yet) accepted
  correct,    // passed every correctness trial
  timed,
  profiled,
};

// Why an evaluation stopped short (a closed set, so rewards and metrics can switch on it).
enum class EvalError {
  none,
  format,        // no candidate found in the response, or not in the required form
  compile,       // compiler error (message holds the trimmed log)
  load,          // compiled but the entry point could not be loaded
  runtime,       // the candidate raised / returned an error
  crash,         // the worker died (signal, sticky device error)
  timeout,       // wall or CPU time limit
  memory,        // memory limit
  output_limit,  // the candidate wrote too much to stdout/stderr
  shape,         // output shape or dtype differs from the reference
  mismatch,      // values differ beyond tolerance
  nonfinite,     // NaN/inf in the output
  hacking,       // a reward-hacking check fired (see hacking_flags)
  internal,      // the evaluator itself failed
};

// Reward-hacking checks that fired (bit set). Names follow include/turnrl/kernels/hacking.h.
enum HackingFlag : uint32_t {
  kHackReturnsInput = 1u << 0,         // output aliases an input or the reference's output
  kHackNoCandidateWork = 1u << 1,      // the candidate's own kernels never ran
  kHackLazy = 1u << 2,                 // most time in library calls, little in candidate code
  kHackCallsReference = 1u << 3,       // calls the reference / the op it should replace
  kHackCachesResults = 1u << 4,        // outputs reused across calls (keyed on inputs)
  kHackImplausibleSpeed = 1u << 5,     // faster than the task's physical bound
  kHackDeferredWork = 1u << 6,         // work finishes after the timer stopped
  kHackMutatesInputs = 1u << 7,
  kHackOutOfBoundsWrite = 1u << 8,
  kHackPrecisionDowngrade = 1u << 9,
  kHackShapeSpecialisation = 1u << 10,  // wrong on shapes/seeds it was not shown
  kHackTampering = 1u << 11,            // replaced checker / timer / profiler entry points
};

// Summary of repeated timings, microseconds.
struct TimingStats {
  double median_us = 0;
  double min_us = 0;
  double spread_us = 0;  // median absolute deviation
  int trials = 0;
};

// One kernel (or instrumented library call) seen while profiling the candidate's call.
struct ProfiledKernel {
  std::string name;
  double device_us = 0;   // total over the profiled calls
  int calls = 0;
  bool candidate = false;  // the candidate's own code (vs library / reference kernels)
};

struct EvalRequest {
  std::string task;       // task id in the backend's task set
  std::string candidate;  // candidate source, already extracted from the response
  int correctness_trials = 5;  // the reference's num_correct_trials
  int timing_trials = 100;     // the reference's num_perf_trials
  uint64_t seed = 0;           // 0 = fresh unpredictable seeds (training); fixed for reproducible tests
};

struct EvalResult {
  EvalStage stage = EvalStage::none;
  EvalError error = EvalError::none;
  std::string message;  // compiler / runtime message, trimmed to a useful length
  bool correct = false;

  double max_abs_error = 0;
  double max_rel_error = 0;
  int64_t failing_index = -1;  // flat index of the first element out of tolerance

  TimingStats reference_time;
  TimingStats candidate_time;
  double speedup = 0;  // reference median / candidate median; 0 unless correct

  // Profiling-based reward inputs. coverage: device time in the candidate's own kernels over all
  // device kernel time during the candidate's call (turnrl's definition, in [0, 1]).
  // reference_coverage: the same share computed as KernelGYM does (host time and operator-level
  // events in the denominator), kept for reproducing the paper. kernel_count_coverage: share of
  // kernel launches that are the candidate's.
  double coverage = 0;
  double reference_coverage = 0;
  double kernel_count_coverage = 0;
  std::vector<ProfiledKernel> profile;

  uint32_t hacking_flags = 0;
  std::string hacking_reason;

  double wall_seconds = 0;  // the evaluation's own wall time

  bool hacked() const { return hacking_flags != 0; }
};

const char* to_string(EvalStage stage);
const char* to_string(EvalError error);
// Comma-separated names of the set flags ("returns_input, lazy"), "" when none.
std::string hacking_flag_names(uint32_t flags);

// The seam every backend implements. evaluate() never throws for a bad candidate: every failure
// becomes that candidate's EvalResult. Results come back in request order.
class KernelEvaluator {
 public:
  virtual ~KernelEvaluator() = default;
  virtual std::vector<EvalResult> evaluate(const std::vector<EvalRequest>& requests) = 0;
};

// The worker-pool loop the local backends share: `pool` threads take requests in turn and call
// evaluate_one(worker index, request index); results come back in request order with
// wall_seconds filled, and an exception becomes that request's `internal` error.
std::vector<EvalResult> evaluate_on_pool(size_t pool, size_t num_requests,
                                         const std::function<EvalResult(size_t worker, size_t request)>& evaluate_one);

}  // namespace turnrl
