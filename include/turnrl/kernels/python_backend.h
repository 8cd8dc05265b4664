#pragma once
// The Python backend of the kernel evaluator: KernelBench/KernelGYM-format tasks (python_tasks.h)
// whose candidates are Python `ModelNew` modules calling Triton kernels, CUDA through load_inline, or
// PyTorch. A pool of persistent Python workers (python/turnrl_eval_worker.py; 4 per GPU, or one per
// core on CPU, plus a spare started ahead), each a SandboxWorker, serves every evaluation as these
// requests, each carrying a fresh nonce that its reply must echo:
//   reference  the reference's outputs for a fresh trial plan, computed before the candidate is
//              imported into that interpreter, shipped to this process as raw bytes or, too large,
//              kept on the worker's device under a one-time pad (with a reused reference timing,
//              also its outputs for this evaluation's checked timed calls);
//   timing     each side alone, the same loop, holding the device's measurement lock (cuda): the
//              reference's before the candidate is imported (once per task text, device and timing
//              plan when reused), the candidate's only when it is correct and unflagged; every
//              timed call profiled,
//              CUDA events on the worker's stream with an L2 flush (or the monotonic clock on CPU),
//              outputs of randomly chosen timed calls shipped back; the parent bills both requests
//              from outside (worker CPU time, or its own clock on CUDA) and compares;
//   candidate  static checks, import into a fresh module, correctness trials (outputs as raw bytes,
//              compared here; outputs too large to ship are compared on the worker's device and
//              checked here at places drawn after the call: ProblemScaling), per-call observations;
//   release    the candidate is dropped and the process state checked once more; then a ping whose
//              reply must come straight back (nothing else may be left on the channel).
// A fresh CPU worker first gets the candidate seccomp profile ("confine"). A worker that crashes,
// hangs, floods its output, runs out of memory, is caught tampering, sends a frame it was not asked
// for, keeps threads running after its reply or whose CUDA context is poisoned is killed and
// replaced; the result says why. docs/evaluator.md, "Python backend (KernelBench format)", has the
// protocol, the checks and the trust argument.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "turnrl/kernels/backends.h"
#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/hacking.h"
#include "turnrl/kernels/problem_scaling.h"
#include "turnrl/kernels/python_tasks.h"
#include "turnrl/kernels/sandbox.h"

namespace turnrl {

struct PythonEvalOptions {
  std::string executable;  // "" = resolve_python_executable: $TURNRL_PYTHON, else python3 on PATH
  std::string device = "auto";         // cpu | cuda | auto (cuda when torch sees a GPU)
  int workers = 0;                     // total; 0 = workers_per_device on every device
  int workers_per_device = 0;          // 0: 4 per GPU (cuda), one per core (cpu)
  // Whether the timed and profiled requests (both sides' timing and profile) hold a lock of their
  // device in this process, so that no two workers measure on one device at once while module exec,
  // Triton compiles and correctness trials run in parallel. on | off | auto: on for cuda; off for
  // cpu, where the workers' device is the cores themselves (one worker per core): a lock would put
  // every timed loop, most of a CPU evaluation, on one core, and the CPU checks bill each worker's
  // own CPU time, which other workers' load does not change.
  std::string exclusive_measurement = "auto";
  // A spare worker per device, started in the background when the pool starts and after each time
  // one is taken: a worker replaced after a fault or max_evals_per_worker costs no start (11-14 s
  // on an H200). Never with fresh_worker_per_eval (that baseline pays every start).
  bool spare_worker = true;
  // The reference is timed (and on cuda profiled) once per (task text, device name, timing plan),
  // in a clean worker as always, and that measurement serves every later evaluation of the task;
  // each evaluation's reference request then ships the reference's outputs for its own checked
  // timed calls. Off: timed in every evaluation (the candidate is compared with a reference timed
  // moments before in the same worker, which cancels drift). Never reused for a reference that
  // changes its inputs.
  bool reuse_reference_timing = true;
  SandboxLimits limits = default_limits();  // per worker; address space is lifted on cuda (below)
  std::string worker_script;           // "" = find_python_worker()
  int warmup = 3;                      // untimed calls of each side before timing
  int profile_calls = 5;               // cuda: profiled calls after timing (on cpu the timed calls are)
  int timing_checks = 3;               // timed calls whose outputs are shipped back and checked
  int max_evals_per_worker = 200;      // then the worker is replaced
  bool fresh_worker_per_eval = false;  // a new interpreter for every evaluation (the baseline)
  double l2_flush_mib = 256;           // cuda: buffer written between timed calls
  size_t message_chars = 2000;         // tracebacks are trimmed to this
  HackingThresholds hacking;
  ProblemScaling scaling;

  PythonEvalOptions& python(const std::string& exe) { executable = exe; return *this; }
  PythonEvalOptions& on(const std::string& d) { device = d; return *this; }
  PythonEvalOptions& num_workers(int n) { workers = n; return *this; }
  PythonEvalOptions& per_device(int n) { workers_per_device = n; return *this; }
  PythonEvalOptions& exclusive(const std::string& mode) { exclusive_measurement = mode; return *this; }
  PythonEvalOptions& spare(bool on) { spare_worker = on; return *this; }
  PythonEvalOptions& reuse_reference(bool on) { reuse_reference_timing = on; return *this; }
  PythonEvalOptions& sandbox(const SandboxLimits& l) { limits = l; return *this; }
  PythonEvalOptions& thresholds(const HackingThresholds& t) { hacking = t; return *this; }
  PythonEvalOptions& scale(const ProblemScaling& s) { scaling = s; return *this; }

  // 60 s per call (an evaluation's correctness trials or its timing), 120 s to start (interpreter,
  // torch import, warm-up), 16 GiB of address space on CPU, 256 MiB of files (extension builds).
  static SandboxLimits default_limits();
};

// What an interpreter offers, asked once with the caller's own environment (PYTHONPATH, user site,
// virtual environments): the worker is then started isolated (-I) with exactly this sys.path.
struct PythonRuntime {
  std::string executable;             // sys.executable (resolves shims and PATH)
  std::vector<std::string> sys_path;
  std::string python_version;
  bool has_torch = false;             // importable (found by importlib)
  bool has_triton = false;            // importable (found by importlib)
  std::string torch_version;          // only when import_torch
  bool cuda = false;                  // torch.cuda.is_available(), only when import_torch
  int gpus = 0;
  std::string error;                  // why the interpreter could not be asked, or torch's import error
};
PythonRuntime probe_python(const std::string& executable, bool import_torch);

// The interpreter a python evaluator runs, the one place that decides it: `configured`
// (evaluator.python.executable) when not empty, else $TURNRL_PYTHON, else python3 from PATH.
std::string resolve_python_executable(const std::string& configured);

// The worker script: $TURNRL_PYTHON_WORKER, else python/turnrl_eval_worker.py among turnrl's data
// (core/install_paths.h: $TURNRL_DATA_DIR, <program>/../share/turnrl, ...). Throws turnrl::Error
// naming the places it looked.
std::string find_python_worker();

// One request's handling in a worker, on the worker's monotonic clock (CLOCK_MONOTONIC, this
// process's steady clock): measurements of one device never overlap when exclusive.
struct PhaseInterval {
  std::string phase;  // e.g. "timing.candidate", "profile.reference", "candidate"
  double start_seconds = 0, end_seconds = 0;
};

class PythonEvaluator : public KernelEvaluator {
 public:
  // Throws turnrl::Error when the interpreter or torch is missing, or device is unknown.
  PythonEvaluator(PythonTaskSet tasks, PythonEvalOptions options = {});
  ~PythonEvaluator() override;

  // Spreads the batch over the pool; results in request order; never throws for a bad candidate.
  std::vector<EvalResult> evaluate(const std::vector<EvalRequest>& requests) override;

  const PythonTaskSet& tasks() const;
  const PythonEvalOptions& options() const;
  const std::string& device() const;  // "cpu" or "cuda" after resolving auto
  const PythonRuntime& runtime() const;
  int pool_size() const;
  int worker_starts() const;  // interpreters started so far, over the whole pool
  // Workers replaced after an evaluation because its candidate left a process running in their
  // sandbox (SandboxWorker::stray_processes; only possible on CUDA, where workers may start processes).
  int stray_process_restarts() const;
  // Where the last evaluations' time went, seconds, per request: for each worker request ("info",
  // "reference", "candidate", "timing", "release") the worker's own handling time under its name
  // and the parent's round trip (worker start included) under "<name>/round_trip".
  // Also, under their own names, the worker's parts of a request ("candidate.exec",
  // "candidate.first_call", "candidate.trials", "ship", ...; python/turnrl_eval_worker.py's _Phase)
  // and this process's own: "parent" (planning, decoding and comparing outputs: the evaluation's
  // time outside its requests), "measure_wait" (waiting for the device's measurement lock) and
  // "worker_wait" (for a started worker when the slot's is gone: the spare, or a start here).
  // Requests that measure are named "<op>.<side>" ("timing.reference", "profile.candidate").
  const std::vector<std::map<std::string, double>>& last_phase_seconds() const;
  // Per request of the last evaluate(): every worker request's span on the worker's clock, in order.
  const std::vector<std::vector<PhaseInterval>>& last_phase_intervals() const;
  // Whether timing and profiling hold a per-device lock (exclusive_measurement after resolving auto).
  bool exclusive_measurement() const;
  // The first worker's "info" reply (versions, device name, measured bandwidth) as JSON; starts it.
  std::string worker_info();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The `evaluator.backend: python` factory: tasks from evaluator.python.tasks_file, the interpreter,
// device and start-up limit from evaluator.python, workers / warmup / wall_seconds from evaluator.
std::shared_ptr<KernelEvaluator> make_python_evaluator(const EvaluatorConfig& config);

}  // namespace turnrl
