#pragma once
// Reference timings cached per (task, task fingerprint, device kind), shared between remote
// workers through Redis, so that a cached-reference request does not re-time the reference.
//
// The fingerprint hashes everything the reference's timing depends on that can change under the
// same task name (inputs, shapes, tolerances, description, the timing settings and the worker
// program's bytes, which hold the reference code): a changed task gets a new key, so stale
// entries are never read; they expire after their TTL. The first measurement stored for a key
// wins (SET NX): every worker then reports the same reference time for that task and device kind.
//
// Why it is opt-in (evaluator.remote.cached_reference_timing): the CPU backend times reference
// and candidate interleaved on the same buffers, which cancels drift and load. A cached median
// comes from another moment, process and possibly machine of the same kind.
#include <map>
#include <optional>
#include <string>

#include "turnrl/kernels/cpu_backend.h"
#include "turnrl/kernels/evaluator.h"

namespace turnrl {

class RedisConnection;

struct ReferenceTimingKey {
  std::string task;
  std::string fingerprint;  // hex; changes whenever the task's definition does
  std::string device;       // device kind, e.g. "cpu:AMD EPYC 7B13"
};

// The CPU backend's fingerprint of a task, given the evaluator options that shape its timing.
std::string cpu_task_fingerprint(const std::string& task, const CpuEvalOptions& options);
// "cpu:<model name from /proc/cpuinfo>".
std::string cpu_device_kind();

class ReferenceTimingCache {
 public:
  // Entries live under "<prefix>:reference:<device>:<task>:<fingerprint>"; redis may be null (a
  // process-local cache).
  ReferenceTimingCache(RedisConnection* redis, std::string prefix, double ttl_seconds);

  std::optional<TimingStats> find(const ReferenceTimingKey& key);
  // Stores unless an entry exists (the first measurement wins); returns the entry now in force.
  TimingStats store(const ReferenceTimingKey& key, const TimingStats& stats);
  std::string redis_key(const ReferenceTimingKey& key) const;

 private:
  RedisConnection* redis_;
  std::string prefix_;
  double ttl_seconds_;
  std::map<std::string, std::pair<TimingStats, double>> local_;  // key -> (stats, expiry, steady s)
};

// Fills a result's reference time from the cache entry and recomputes its speedup (only for
// correct, timed results: the backend's rule).
void apply_reference_timing(EvalResult& result, const TimingStats& reference);

}  // namespace turnrl
