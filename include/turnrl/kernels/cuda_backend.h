#pragma once
// The CUDA backend of the kernel evaluator: candidates are CUDA C++ sources (cuda_launch.h: a
// single kernel the evaluator launches, compiled with NVRTC for the device's own architecture,
// or an extern "C" launcher compiled with nvcc) checked against LibTorch CUDA references
// (cuda_tasks.h) in one sandboxed worker process per GPU. Pipeline per request:
//   references (before the candidate's code is loaded) -> compile (cached by source hash + arch)
//   -> load -> correctness trials (outputs poisoned, guard bands, fresh seeded inputs) -> timing
//   (CUDA events, dedicated stream, L2 flushed before every run, reference interleaved) ->
//   profiling (CUPTI activity records: every kernel, memcpy and memset during the candidate's
//   calls, on any stream) -> hacking checks.
// A sticky CUDA error (illegal address, launch failure) costs that candidate only: its worker
// replies, exits, and is restarted for the next request. No CUDA headers here.
#include <memory>
#include <string>
#include <vector>

#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/hacking.h"
#include "turnrl/kernels/sandbox.h"

namespace turnrl {

struct CudaEvalOptions {
  std::vector<int> devices;        // GPU ordinals (as this process sees them); [] = every visible GPU
  // Workers share their GPU's measurement lock: their compiles (in the parent's sandbox) run in
  // parallel on the CPU cores, their correctness and timed calls take turns on the GPU.
  int workers_per_device = 4;
  SandboxLimits limits = default_limits();  // per worker process
  std::string cache_dir;           // "" = $TURNRL_EVAL_CACHE/cuda, else $TMPDIR/turnrl-cuda-cache-<uid>
  std::string nvcc;                // launcher form; "" = $CUDA_HOME/bin/nvcc, /usr/local/cuda/bin/nvcc, PATH
  double compile_seconds = 60;
  int warmup = 3;
  int profile_calls = 3;           // CUPTI-profiled pairs, drawn at random among the timed ones (kept out of the times)
  double l2_flush_mib = 0;         // 0 = twice the device's L2
  int max_evals_per_worker = 512;  // then the worker is replaced (loaded launcher libraries accumulate)
  size_t message_chars = 2000;
  HackingThresholds hacking;

  // CUDA reserves far more address space than it uses: no RLIMIT_AS; wall/CPU limits per call;
  // no user namespace (the GPU device files must stay reachable).
  static SandboxLimits default_limits() {
    SandboxLimits l;
    l.address_space_bytes = int64_t(1) << 62;
    l.wall_seconds = l.cpu_seconds = 60;
    l.startup_seconds = 120;
    l.isolate_network = false;
    l.file_bytes = int64_t(256) << 20;
    l.open_files = 1024;
    return l;
  }
  CudaEvalOptions& on_devices(std::vector<int> d) { devices = std::move(d); return *this; }
  CudaEvalOptions& cache(const std::string& dir) { cache_dir = dir; return *this; }
  CudaEvalOptions& sandbox(const SandboxLimits& l) { limits = l; return *this; }
  CudaEvalOptions& thresholds(const HackingThresholds& t) { hacking = t; return *this; }
};

class CudaEvaluator : public KernelEvaluator {
 public:
  // Throws turnrl::Error when this turnrl was built without CUDA or no GPU is visible.
  explicit CudaEvaluator(CudaEvalOptions options = {});
  ~CudaEvaluator() override;

  std::vector<EvalResult> evaluate(const std::vector<EvalRequest>& requests) override;

  const CudaEvalOptions& options() const;
  int pool_size() const;
  int worker_starts() const;  // worker processes started so far (restarts after faults included)
  // Where the last evaluations' time went, seconds, in request order: the worker's own account of
  // compiling (0 for cache hits), the correctness trials (comparisons included), the timed trials
  // and the profiled calls; the rest of an evaluation's wall time is transport and the parent.
  struct PhaseSeconds {
    double compile = 0, correctness = 0, timing = 0, profiling = 0;
  };
  const std::vector<PhaseSeconds>& last_phase_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// GPUs this process can use: CUDA_VISIBLE_DEVICES-aware device count (0 without CUDA).
int visible_cuda_devices();

}  // namespace turnrl
