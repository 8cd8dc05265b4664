#pragma once
// Choosing an evaluator backend by name: the configuration every backend reads (the `evaluator:`
// section of a training config) and the factory the trainer and the CLI call. Each backend reads
// its own subsection; the shared keys sit at the top level of the section.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/problem_scaling.h"

namespace turnrl {

class ConfigReader;
class ConfigWriter;

// evaluator.cuda: the NVRTC/CUPTI backend (cuda_backend.h).
struct CudaEvaluatorConfig {
  std::vector<int64_t> devices;  // GPU ordinals; [] = every visible GPU. Candidates compile for each
                                 // device's own architecture (sm_90a on an H200)
  double l2_flush_mib = 0;       // L2-flush buffer size; 0 = twice the device's L2
};

// evaluator.python: KernelBench/KernelGYM-format tasks run by persistent Python workers.
struct PythonEvaluatorConfig {
  std::string executable;  // the interpreter; "" = $TURNRL_PYTHON, else python3 on PATH
  std::string device = "auto";         // cpu | cuda | auto (cuda when torch.cuda.is_available())
  std::string tasks_file;              // JSON Lines task file the backend checks against
  double startup_seconds = 120;        // interpreter + torch import of a fresh worker
  int64_t workers_per_device = 0;      // 0 = 4 per GPU (cuda), one per core (cpu); evaluator.workers > 0 = total
  std::string exclusive_measurement = "auto";  // on | off | auto (PythonEvalOptions::exclusive_measurement)
  bool spare_worker = true;            // a worker per device started ahead to replace one
  bool reuse_reference_timing = true;  // reference timed once per (task text, device, timing plan)
  ProblemScaling scaling;              // YAML: scaling.{ship_mib, spot_checks, large_mib, ...}
};

// evaluator.remote: requests go to a Redis stream served by `turnrl eval-worker` processes.
struct RemoteEvaluatorConfig {
  std::string redis_url = "redis://127.0.0.1:6379";
  // The local backend the eval-workers run (cpu | cuda | python): it picks the built-in task suite
  // the trainer sends (tasks.source: builtin) and is `turnrl eval-worker`'s default --backend.
  std::string worker_backend = "cpu";
  std::string stream = "turnrl:eval";   // request stream (results use <stream>:results:<client>)
  double deadline_seconds = 900;        // per request; past it the result is a timeout
  double visibility_timeout_seconds = 120;  // an unacknowledged request is claimed again after this
  double result_ttl_seconds = 3600;     // stored results expire after this
  // A request delivered more often than this (its workers died or stalled before answering: a
  // candidate that kills its evaluator) is answered with a crash result instead of evaluated again.
  int64_t max_deliveries = 3;
  // Requests ask workers for a cached reference timing (ReferenceTimingCache, cpu backend): the
  // reference is timed once per (task definition, device kind) and shared through Redis instead
  // of interleaved with every candidate. Faster; trades away drift cancellation.
  bool cached_reference_timing = false;
  double reference_ttl_seconds = 86400;  // cached reference timings expire after this
};

struct EvaluatorConfig {
  std::string backend = "cpu";  // cpu | cuda | python | remote
  // worker processes; 0 = one per core (cpu, python on cpu), 4 per GPU (cuda) or python.workers_per_device
  int64_t workers = 0;
  std::string cache_dir;        // compiled-candidate cache; "" = $TURNRL_EVAL_CACHE or $TMPDIR
  double compile_seconds = 60;
  int64_t warmup = 3;           // untimed runs before timing
  double wall_seconds = 20;     // per call of a worker (correctness or timing), then it is killed
  // namespaces | rlimits-only: how candidates and compilers are isolated (sandbox.h); rlimits-only
  // is the weaker mode for machines without user namespaces, never chosen silently.
  std::string sandbox = "namespaces";
  CudaEvaluatorConfig cuda;
  PythonEvaluatorConfig python;
  RemoteEvaluatorConfig remote;
};

// The local backend whose built-in tasks a config's trainer uses: evaluator.backend, or
// evaluator.remote.worker_backend when that is "remote".
std::string builtin_task_backend(const EvaluatorConfig& config);

// The backends this build of turnrl can make (cuda only when built with CUDA, remote only with
// hiredis), in the order docs/evaluator.md lists them.
std::vector<std::string> built_evaluator_backends();

// Reads the `evaluator:` section (and its cuda/python/remote subsections) strictly.
void read_evaluator_config(ConfigReader& reader, EvaluatorConfig& config);
// Writes the section's keys (what read_evaluator_config reads), with their help when annotating.
void write_evaluator_config(ConfigWriter& writer, const EvaluatorConfig& config);

// Makes the configured backend; throws turnrl::Error naming `evaluator.backend` and the backends
// this build has when the requested one is not built in.
std::shared_ptr<KernelEvaluator> make_evaluator(const EvaluatorConfig& config);

}  // namespace turnrl
