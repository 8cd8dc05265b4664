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

// One correctness trial: fresh inputs of a shape set from a seed, at new addresses; or (reuse)
// the previous trial's buffers, restored and then rewritten in their second halves.
struct TrialPlan {
  int32_t shape_set = 0;
  uint64_t seed = 0;
  uint8_t reuse = 0;
  uint64_t tail_seed = 0;
  std::vector<std::vector<int64_t>> output_shapes;
  void write(Writer& w) const { w.put(shape_set), w.put(seed), w.put(reuse), w.put(tail_seed), w.put(output_shapes); }
  void read(Reader& r) { r.get(shape_set), r.get(seed), r.get(reuse), r.get(tail_seed), r.get(output_shapes); }
};

struct WorkerRequest {
  std::string task;
  std::string library_path;
  std::vector<TrialPlan> trials;
  int32_t warmup = 3;
  int32_t timing_trials = 0;  // 0: no timing
  uint64_t timing_seed = 0;
  std::vector<std::vector<int64_t>> timing_output_shapes;
  uint8_t flush_caches = 1;
  uint8_t time_reference = 1;  // 0: the timing loop runs the candidate only (CpuEvalOptions::time_reference)
  void write(Writer& w) const {
    w.put(task), w.put(library_path), w.put(trials), w.put(warmup), w.put(timing_trials), w.put(timing_seed),
        w.put(timing_output_shapes), w.put(flush_caches), w.put(time_reference);
  }
  void read(Reader& r) {
    r.get(task), r.get(library_path), r.get(trials), r.get(warmup), r.get(timing_trials), r.get(timing_seed),
        r.get(timing_output_shapes), r.get(flush_caches), r.get(time_reference);
  }
};

// What the worker saw around one call of the candidate.
struct CallReport {
  int32_t rc = 0;
  std::vector<std::vector<float>> outputs;  // snapshot taken as the call returned
  uint8_t aliases_input = 0;   // an output descriptor was pointed into an input buffer
  uint8_t repointed = 0;       // an output descriptor was pointed elsewhere
  uint8_t mutated_inputs = 0;  // input bytes changed
  uint8_t out_of_bounds = 0;   // guard region around an output changed
  uint8_t left_threads = 0;    // the process had more threads after the call than before
  uint8_t changed_after_return = 0;  // outputs kept changing after the call returned
  double call_us = 0, lib_us = 0;
  void write(Writer& w) const {
    w.put(rc), w.put(outputs), w.put(aliases_input), w.put(repointed), w.put(mutated_inputs), w.put(out_of_bounds),
        w.put(left_threads), w.put(changed_after_return), w.put(call_us), w.put(lib_us);
  }
  void read(Reader& r) {
    r.get(rc), r.get(outputs), r.get(aliases_input), r.get(repointed), r.get(mutated_inputs), r.get(out_of_bounds),
        r.get(left_threads), r.get(changed_after_return), r.get(call_us), r.get(lib_us);
  }
};

struct LibStat {
  double us = 0;
  int64_t calls = 0;
};

enum class WorkerStatus : int32_t { ok = 0, load_failed = 1, runtime_error = 2, bad_request = 3 };

struct WorkerReply {
  WorkerStatus status = WorkerStatus::ok;
  std::string message;
  int32_t failed_trial = -1;             // the correctness trial that raised (runtime_error)
  std::vector<CallReport> trials;        // one per correctness trial run
  std::vector<double> reference_us, candidate_us;  // timing samples (interleaved runs)
  double candidate_lib_us = 0;           // library time during the timed candidate calls
  int64_t candidate_lib_calls = 0;
  double timing_loop_us = 0;             // wall time of the candidate half of the timing loop
  std::vector<std::string> lib_names;    // per-routine library profile over the timed calls
  std::vector<LibStat> lib_stats;
  CallReport recheck;                    // the last timed call (post-timing re-check)
  uint8_t timed = 0;
  double bandwidth_bytes_per_s = 0;      // the worker's measured copy bandwidth
  void write(Writer& w) const {
    w.put(status), w.put(message), w.put(failed_trial), w.put(trials), w.put(reference_us), w.put(candidate_us),
        w.put(candidate_lib_us), w.put(candidate_lib_calls), w.put(timing_loop_us), w.put(lib_names),
        w.put(lib_stats), w.put(recheck), w.put(timed), w.put(bandwidth_bytes_per_s);
  }
  void read(Reader& r) {
    r.get(status), r.get(message), r.get(failed_trial), r.get(trials), r.get(reference_us), r.get(candidate_us),
        r.get(candidate_lib_us), r.get(candidate_lib_calls), r.get(timing_loop_us), r.get(lib_names),
        r.get(lib_stats), r.get(recheck), r.get(timed), r.get(bandwidth_bytes_per_s);
  }
};

template <typename T>
std::string encode(const T& v) {
  Writer w;
  v.write(w);
  return w.data();
}
template <typename T>
T decode(const std::string& s) {
  Reader r(s);
  T v;
  v.read(r);
  return v;
}

// The worker's entry (src/eval/cpu_worker.cpp); turnrl_cpu_worker's main calls it.
int cpu_worker_main(int argc, char** argv);

}  // namespace turnrl::cpu_detail
