#pragma once
// Messages between the CUDA backend (parent) and its sandboxed worker (turnrl_cuda_worker), in
// the CPU backend's binary encoding (cpu_protocol.h). Internal to the backend; documented in
// docs/evaluator.md ("CUDA backend").
#include <cstdint>
#include <string>
#include <vector>

#include "turnrl/kernels/cpu_backend.h"
#include "turnrl/kernels/cpu_protocol.h"
#include "turnrl/kernels/cpu_tasks.h"

namespace turnrl::cuda_detail {

using cpu_detail::Reader;
using cpu_detail::Writer;
using cpu_detail::decode;
using cpu_detail::encode;

// One correctness trial: fresh inputs of a shape set from a seed in fresh buffers, or (reuse) the
// previous trial's buffers with their second halves rewritten in place (the cache check). `shapes`,
// when not empty, are the inputs' shapes instead of the task's shape_sets[shape_set] (the sets
// drawn per evaluation).
struct CudaTrialPlan {
  int32_t shape_set = 0;
  uint64_t seed = 0;
  uint8_t reuse = 0;
  uint64_t tail_seed = 0;
  ShapeSet shapes;
  void write(Writer& w) const { w.put(shape_set), w.put(seed), w.put(reuse), w.put(tail_seed), w.put(shapes); }
  void read(Reader& r) { r.get(shape_set), r.get(seed), r.get(reuse), r.get(tail_seed), r.get(shapes); }
};

// correctness: load the compiled candidate and run `trials`; timing: warm-up, then timing_trials
// + profile_calls calls of each side, profile_calls of them (chosen at random by the worker)
// profiled; ping: nothing, the reply only echoes the nonce (the parent's proof that nothing else is
// queued on the channel); reference_timing: the reference alone, timed as in a timing request, in
// a worker that never loads a candidate.
enum class CudaRequestKind : uint8_t { correctness = 0, timing = 1, ping = 2, reference_timing = 3 };

struct CudaWorkerRequest {
  CudaRequestKind kind = CudaRequestKind::correctness;
  uint64_t nonce = 0;           // echoed by the reply; fresh for every request
  std::string task;
  std::string source;
  // The candidate compiled by the parent (cuda_compile.h): the bytes of its cubin (kernel form) or
  // shared object (launcher form), and their FNV-1a (hex), under which the worker keeps what it
  // loaded. The object travels in the request: the parent's cache is not in the worker's view, so a
  // candidate cannot read, load or copy another candidate's object.
  std::string object;
  std::string object_hash;
  std::vector<CudaTrialPlan> trials;
  int32_t warmup = 3;
  int32_t timing_trials = 0;    // timed calls of each side (timing, reference_timing)
  uint64_t timing_seed = 0;
  int32_t profile_calls = 3;    // further calls of the candidate, profiled, among the timed ones
  double l2_flush_mib = 0;      // 0: twice the device's L2
  void write(Writer& w) const {
    w.put(kind), w.put(nonce), w.put(task), w.put(source), w.put(object), w.put(object_hash), w.put(trials),
        w.put(warmup), w.put(timing_trials), w.put(timing_seed), w.put(profile_calls), w.put(l2_flush_mib);
  }
  void read(Reader& r) {
    r.get(kind), r.get(nonce), r.get(task), r.get(source), r.get(object), r.get(object_hash), r.get(trials),
        r.get(warmup), r.get(timing_trials), r.get(timing_seed), r.get(profile_calls), r.get(l2_flush_mib);
  }
};

// What the worker saw around one candidate call: its outputs compared with the reference's on the
// same inputs (computed before the candidate's code was loaded), in the worker with compare_all, at
// the task's tolerance and at the float32 precision tolerance of the precision-downgrade check.
// Only these verdicts cross the pipe: a task's outputs are up to 64 MiB each.
struct CudaCallReport {
  Comparison task_tolerance, precision_tolerance;  // plain values: sent as bytes
  std::vector<std::vector<int64_t>> shapes;  // reference output shapes
  uint8_t out_of_bounds = 0;   // a guard band around an output changed
  uint8_t mutated_inputs = 0;  // input bytes changed
  void write(Writer& w) const {
    w.put(task_tolerance), w.put(precision_tolerance), w.put(shapes), w.put(out_of_bounds), w.put(mutated_inputs);
  }
  void read(Reader& r) {
    r.get(task_tolerance), r.get(precision_tolerance), r.get(shapes), r.get(out_of_bounds), r.get(mutated_inputs);
  }
};

// One kernel (or memcpy/memset) name seen by CUPTI during the profiled candidate calls.
struct CudaProfiledKernel {
  std::string name;
  double us = 0;
  int32_t calls = 0;
  uint8_t own = 0;           // defined in the candidate's source
  uint8_t other_stream = 0;  // ran on a stream other than the evaluator's
  uint8_t after_timer = 0;   // still running when the evaluator's stop event had completed
  void write(Writer& w) const { w.put(name), w.put(us), w.put(calls), w.put(own), w.put(other_stream), w.put(after_timer); }
  void read(Reader& r) { r.get(name), r.get(us), r.get(calls), r.get(own), r.get(other_stream), r.get(after_timer); }
};

enum class CudaWorkerStatus : int32_t {
  ok = 0,
  load_failed = 2,    // the object did not load (or its hash did not match), or no entry point
  runtime_error = 3,  // a launch was refused or the launcher returned non-zero (worker stays)
  device_fault = 4,   // a sticky CUDA error: the worker exits after this reply
  bad_request = 5,
};

struct CudaWorkerReply {
  uint64_t nonce = 0;  // the request's
  CudaWorkerStatus status = CudaWorkerStatus::ok;
  std::string message;
  std::string device;          // name and sm_XY
  std::vector<CudaCallReport> trials;
  std::vector<double> reference_us, candidate_us;  // CUDA-event times of the unprofiled timed calls
  // Every timed and profiled call of the candidate, its outputs copied as soon as its stop event
  // was reached on the stream and compared at both tolerances, its inputs compared with their
  // snapshot: the first call that failed a check (failing_call), else the last.
  CudaCallReport recheck;
  int32_t checked_calls = 0;
  int32_t failing_call = -1;
  std::vector<CudaProfiledKernel> profile;
  double profiled_call_us = 0;  // event time of the profiled calls, summed
  int32_t profiled_calls = 0;
  // Device state a candidate call left changed (the persisting-L2 set-aside or the stream's
  // access-policy window, which would keep data in L2 across the flush); "" when none. The worker
  // resets it after every call.
  std::string state_change;
  double bandwidth_bytes_per_s = 0;  // measured device-to-device copy bandwidth
  double fp32_flops = 0;             // the device's fp32 peak (SM count x clock x 256)
  double seconds_setup = 0, seconds_correctness = 0, seconds_timing = 0, seconds_profiling = 0;
  void write(Writer& w) const {
    w.put(nonce), w.put(status), w.put(message), w.put(device), w.put(trials), w.put(reference_us),
        w.put(candidate_us), w.put(recheck), w.put(checked_calls), w.put(failing_call), w.put(profile),
        w.put(profiled_call_us), w.put(profiled_calls), w.put(state_change), w.put(bandwidth_bytes_per_s),
        w.put(fp32_flops), w.put(seconds_setup), w.put(seconds_correctness), w.put(seconds_timing),
        w.put(seconds_profiling);
  }
  void read(Reader& r) {
    r.get(nonce), r.get(status), r.get(message), r.get(device), r.get(trials), r.get(reference_us),
        r.get(candidate_us), r.get(recheck), r.get(checked_calls), r.get(failing_call), r.get(profile),
        r.get(profiled_call_us), r.get(profiled_calls), r.get(state_change), r.get(bandwidth_bytes_per_s),
        r.get(fp32_flops), r.get(seconds_setup), r.get(seconds_correctness), r.get(seconds_timing),
        r.get(seconds_profiling);
  }
};

// The worker's entry (src/kernels/cuda_worker_cuda.cpp); turnrl_cuda_worker's main calls it.
int cuda_worker_main(int argc, char** argv);

}  // namespace turnrl::cuda_detail
