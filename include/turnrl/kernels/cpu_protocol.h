#pragma once
// Messages between the CPU backend (parent) and its sandboxed worker (turnrl_cpu_worker): a plain
// binary encoding (little-endian PODs, length-prefixed strings and vectors). Internal to the
// backend; documented in docs/evaluator.md.
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "turnrl/core/byte_io.h"
#include "turnrl/core/error.h"

namespace turnrl::cpu_detail {

// The encoding is core's byte stream (core/byte_io.h).
using Writer = ByteWriter;
using Reader = ByteReader;


// One correctness trial: fresh inputs of the given shapes from a seed, at new addresses; or (reuse)
// the previous trial's buffers, restored and then rewritten in their second halves. shape_set
// names the task's shape set (-1: a shape set drawn for this evaluation).
struct TrialPlan {
  int32_t shape_set = 0;
  std::vector<std::vector<int64_t>> input_shapes;
  uint64_t seed = 0;
  uint8_t reuse = 0;
  uint64_t tail_seed = 0;
  std::vector<std::vector<int64_t>> output_shapes;
  void write(Writer& w) const {
    w.put(shape_set), w.put(input_shapes), w.put(seed), w.put(reuse), w.put(tail_seed), w.put(output_shapes);
  }
  void read(Reader& r) {
    r.get(shape_set), r.get(input_shapes), r.get(seed), r.get(reuse), r.get(tail_seed), r.get(output_shapes);
  }
};

// correctness: run `trials`; timing: warm-up + timing_trials calls on perturbed inputs; ping: no
// work, answered at once (the parent's proof that nothing else is queued on the channel).
enum class RequestKind : uint8_t { correctness = 0, timing = 1, ping = 2 };

struct WorkerRequest {
  RequestKind kind = RequestKind::correctness;
  uint64_t nonce = 0;        // echoed by the reply; fresh for every request
  std::string task;
  // The candidate's compiled object, its bytes: the worker writes them into its own private
  // directory and loads them from there, so no worker sees the compile cache (where other
  // candidates' objects are). "" (timing only): time the task's reference instead (clean worker).
  std::string library;
  std::vector<TrialPlan> trials;
  int32_t warmup = 3;
  int32_t timing_trials = 0;
  uint64_t timing_seed = 0;
  std::vector<std::vector<int64_t>> timing_output_shapes;
  uint8_t flush_caches = 1;
  // Reference timing only: allocate through a reusing allocator, so that the time is the
  // operators' alone (the yardstick of the laziness check), not glibc's page faults.
  uint8_t reusing_allocator = 0;
  // Timing only: every timed call is enclosed in two call marks (sandbox_child::mark_call), at which
  // the parent reads this worker's CPU clock from outside.
  uint8_t mark_calls = 0;
  // Correctness and ping only: the heap the timing request that follows holds at its peak (inputs,
  // every timed call's kept outputs, the reply), faulted in now, where no bill is read
  // (keep_heap_warm; the clean worker, which gets no correctness request, gets a ping).
  uint64_t warm_heap_bytes = 0;
  void write(Writer& w) const {
    w.put(kind), w.put(nonce), w.put(task), w.put(library), w.put(trials), w.put(warmup), w.put(timing_trials),
        w.put(timing_seed), w.put(timing_output_shapes), w.put(flush_caches), w.put(reusing_allocator),
        w.put(mark_calls), w.put(warm_heap_bytes);
  }
  void read(Reader& r) {
    r.get(kind), r.get(nonce), r.get(task), r.get(library), r.get(trials), r.get(warmup), r.get(timing_trials),
        r.get(timing_seed), r.get(timing_output_shapes), r.get(flush_caches), r.get(reusing_allocator),
        r.get(mark_calls), r.get(warm_heap_bytes);
  }
};

// What the worker saw around one call (of the candidate, or of the reference in the clean worker).
struct CallReport {
  int32_t rc = 0;
  std::vector<std::vector<float>> outputs;  // snapshot taken as the call returned
  uint8_t aliases_input = 0;   // an output descriptor was pointed into an input buffer
  uint8_t repointed = 0;       // an output descriptor was pointed elsewhere
  uint8_t mutated_inputs = 0;  // input bytes changed
  uint8_t out_of_bounds = 0;   // guard region around an output changed
  uint8_t left_threads = 0;    // the process had more threads after the call than before
  uint8_t changed_after_return = 0;  // outputs kept changing after the call returned
  uint8_t called_replaced = 0;  // called a library routine the task replaces (refused: it wrote nothing)
  uint8_t rewrote_got = 0;      // a loaded library's GOT slot differed after the call (put back)
  double call_us = 0;          // wall-clock time of the call
  double call_cpu_us = 0;      // CPU time of the calling thread during the call
  double lib_us = 0;           // wall-clock time in library routines during the call
  double lib_cpu_us = 0;       // CPU time in library routines during the call
  void write(Writer& w) const {
    w.put(rc), w.put(outputs), w.put(aliases_input), w.put(repointed), w.put(mutated_inputs), w.put(out_of_bounds),
        w.put(left_threads), w.put(changed_after_return), w.put(called_replaced), w.put(rewrote_got), w.put(call_us), w.put(call_cpu_us), w.put(lib_us), w.put(lib_cpu_us);
  }
  void read(Reader& r) {
    r.get(rc), r.get(outputs), r.get(aliases_input), r.get(repointed), r.get(mutated_inputs), r.get(out_of_bounds),
        r.get(left_threads), r.get(changed_after_return), r.get(called_replaced), r.get(rewrote_got), r.get(call_us), r.get(call_cpu_us), r.get(lib_us), r.get(lib_cpu_us);
  }
};

// The instrumented library's routines, in candidate_api.h's order (the names of lib_names).
inline const char* const kLibraryRoutines[] = {"matmul", "softmax_rows", "sum_rows", "max_rows", "add_bias_rows", "add",
                                                "mul", "exp", "tanh", "relu", "sigmoid"};

struct LibStat {
  double us = 0;
  int64_t calls = 0;
};

enum class WorkerStatus : int32_t { ok = 0, load_failed = 1, runtime_error = 2, bad_request = 3 };

struct WorkerReply {
  uint64_t nonce = 0;                    // the request's
  WorkerStatus status = WorkerStatus::ok;
  std::string message;
  int32_t failed_trial = -1;             // the correctness trial that raised (runtime_error)
  std::vector<CallReport> trials;        // one per correctness trial run
  std::vector<CallReport> timed;         // one per timed call, outputs included (timing)
  std::vector<CallReport> warmups;       // one per warm-up call, outputs left out
  std::vector<std::string> lib_names;    // per-routine library profile over the timed calls
  std::vector<LibStat> lib_stats;
  double bandwidth_bytes_per_s = 0;      // the worker's measured copy bandwidth
  std::string state_change;              // process-wide state that differs from start-up ("" none)
  // The clean worker's timing only: every timed call's outputs, copied out and sent as a
  // candidate's worker copies and sends its own (in one buffer reserved before the calls, so the
  // reference's allocations are not disturbed), so that its harness cost, the yardstick of the
  // billed-time check, includes that work. The parent checks the size and reads nothing else.
  std::vector<float> mirrored_outputs;
  void write(Writer& w) const {
    w.put(nonce), w.put(status), w.put(message), w.put(failed_trial), w.put(trials), w.put(timed), w.put(warmups),
        w.put(lib_names), w.put(lib_stats), w.put(bandwidth_bytes_per_s), w.put(state_change), w.put(mirrored_outputs);
  }
  void read(Reader& r) {
    r.get(nonce), r.get(status), r.get(message), r.get(failed_trial), r.get(trials), r.get(timed), r.get(warmups),
        r.get(lib_names), r.get(lib_stats), r.get(bandwidth_bytes_per_s), r.get(state_change), r.get(mirrored_outputs);
  }
};

template <typename T>
std::string encode(const T& v) {
  Writer w;
  v.write(w);
  return w.take();
}
// Throws turnrl::Error when s is short, or longer than one T.
template <typename T>
T decode(const std::string& s) {
  Reader r(s);
  T v;
  v.read(r);
  if (!r.at_end()) throw Error("cpu worker protocol: trailing bytes after the message");
  return v;
}

// The worker's entry (src/kernels/cpu_worker.cpp); turnrl_cpu_worker's main calls it.
int cpu_worker_main(int argc, char** argv);

}  // namespace turnrl::cpu_detail
