#pragma once
// The CPU backend of the kernel evaluator: candidates are C/C++ sources with one extern "C" entry
// point (candidate_api.h), compiled with the host compiler into shared objects (cached by source
// hash) and run in a pool of sandboxed worker processes (sandbox.h) against LibTorch CPU
// references (cpu_tasks.h). Pipeline per request:
//   extract -> static checks -> compile -> import checks -> load -> correctness trials (parent
//   compares against parent-computed references) -> timing (the candidate in its worker, the
//   reference in a clean one; reported times cross-checked with the CPU time the kernel billed) ->
//   profiling (library time against the reference's) -> dynamic hacking checks.
#include <memory>
#include <string>
#include <vector>

#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/measurement.h"
#include "turnrl/kernels/hacking.h"
#include "turnrl/kernels/sandbox.h"

namespace at {
class Tensor;
}

namespace turnrl {

struct CpuEvalOptions {
  int workers = 0;                 // pool size; 0 = one per core
  SandboxLimits limits;            // per worker process
  std::string cache_dir;           // "" = $TURNRL_EVAL_CACHE, else $TMPDIR/turnrl-cpu-cache-<uid>;
                                   // objects in objects/, logs and object hashes beside them
                                   // (workers see none of it: each object travels in its request)
  std::string compiler = "g++";    // found on PATH unless absolute
  double compile_seconds = 60;
  int warmup = 3;
  bool flush_caches = true;        // clflush the task's buffers before every timed run
  // true: the reference is timed in a clean worker (one per pool slot, never loading a candidate)
  // with the same loop on the same inputs, right after the candidate. false: reference_time stays
  // empty and speedup 0, for callers that supply the reference's timing themselves (the remote
  // worker's ReferenceTimingCache); coverage then falls back to the own share of the call.
  bool time_reference = true;
  int max_evals_per_worker = 256;  // then the worker is replaced (bounds leaks and leftover state)
  // The candidate's timed calls are sampled from outside its worker, one user-space instruction
  // pointer every this many us of its thread's CPU time (perf_event_open), and library code that ran
  // outside the routines the worker serves counts as library time (docs/evaluator.md); 0: off. Where
  // perf_event_open is unavailable the calls run unsampled (said once on stderr). Each sample costs
  // the candidate's thread about 14 us on a virtual machine: 1.4 % at 1 ms.
  double code_sample_period_us = 1000;
  // A few more calls than the timed ones (one per 8 timed calls, at least 2, at most 8), at places
  // among them the candidate cannot know, are sampled every this many us instead and left out of the
  // timing (sampling that dense slows a call): a library call hidden in short calls, under three
  // samples of the timed calls at code_sample_period_us, is seen there. 0: no such calls.
  double dense_sample_period_us = 50;
  size_t message_chars = 2000;     // compiler / runtime messages are trimmed to this
  HackingThresholds hacking;

  CpuEvalOptions& num_workers(int n) { workers = n; return *this; }
  CpuEvalOptions& sandbox(const SandboxLimits& l) { limits = l; return *this; }
  CpuEvalOptions& cache(const std::string& dir) { cache_dir = dir; return *this; }
  CpuEvalOptions& thresholds(const HackingThresholds& t) { hacking = t; return *this; }
};

// A compiled (or failed) candidate, as the evaluators' object cache (the CPU and CUDA backends')
// returns it.
struct CompiledCandidate {
  bool ok = false;
  std::string hash;          // hex of the cache key (compiler flags or architecture, form, source)
  std::string library_path;  // the object, when ok: a shared object (a cubin for a CUDA kernel form)
  std::string object_hash;   // object_hash() of the object when it was compiled
  std::string log;           // compiler output, trimmed
  bool cached = false;       // served from the cache
  double seconds = 0;        // compile time (0 when cached)
};

class CpuEvaluator : public KernelEvaluator {
 public:
  explicit CpuEvaluator(CpuEvalOptions options = {});
  ~CpuEvaluator() override;

  // Spreads the batch over the worker pool; results in request order. Never throws for a bad
  // candidate.
  std::vector<EvalResult> evaluate(const std::vector<EvalRequest>& requests) override;

  // Compiles with the fixed flags in the sandbox (where only /usr and the API header exist, so
  // an #include of any other file fails), or returns the cached object for the same source.
  CompiledCandidate compile(const std::string& source);
  // compile(), then the object's bytes checked against the hash recorded when it was compiled:
  // an object changed on disk is never loaded but compiled again (objects_replaced counts it).
  CompiledCandidate verified_object(const std::string& source);

  const CpuEvalOptions& options() const;
  int pool_size() const;
  int worker_starts() const;  // children started so far, over the whole pool
  int compiles() const;       // compiler runs so far (cache misses)
  int objects_replaced() const;  // cached objects found changed and compiled again

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// 64-bit FNV-1a of a file's bytes, in hex ("" when it cannot be read): detects a changed object
// (the cache is out of candidates' reach; this is the check behind that, not a signature).
std::string object_hash(const std::string& path);


}  // namespace turnrl
