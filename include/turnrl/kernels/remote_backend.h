#pragma once
// The remote evaluator: candidates evaluated by `turnrl eval-worker` processes on any number of
// machines, through one Redis stream (evaluator.remote in backends.h; docs/evaluator.md, "Remote
// evaluation (Redis)").
//
//   RemoteEvaluator                         Redis                      RemoteWorker (eval-worker)
//   XADD <stream> {id, reply, deadline,  ─► <stream> ─► XREADGROUP <group> COUNT <pool size>
//                  reference, request}                  evaluate the batch with the local pool
//   XREAD BLOCK <stream>:results:<client> ◄─ XADD result; PEXPIRE <ttl>  ─► then XACK + XDEL
//
// - A request is acknowledged only after its result is stored: a worker that dies holding it
//   leaves it pending, and another worker claims it (XAUTOCLAIM) once it has been idle longer
//   than visibility_timeout_seconds. A result Redis refuses (maxmemory, a reply key of another
//   type) leaves the request pending too; the worker keeps it and retries the write until the
//   request's deadline.
// - A request delivered more than max_deliveries times (it took its workers down) is answered
//   with a crash result instead of being evaluated again.
// - The consumer group is created again wherever Redis says NOGROUP (FLUSHALL, a restart without
//   persistence), and serving goes on.
// - Result streams expire result_ttl_seconds after their last write; a client deletes its own
//   when a batch is complete, and its still-queued requests when they time out.
// - Every request carries an absolute deadline (unix time). The client waits at most until then
//   and returns an EvalError::timeout result for anything unanswered; a worker skips requests
//   already past it. Every Redis call has a time limit of its own.
// - A task evaluated twice (reclaimed from a worker that was slow, not dead) reaches the caller
//   once: the client keeps the first result per request id and drops the rest.
// Built only with hiredis (TURNRL_WITH_REDIS); built_evaluator_backends() says whether it is.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "turnrl/kernels/backends.h"
#include "turnrl/kernels/evaluator.h"

namespace turnrl {

class RedisConnection;

// The fields of a request entry on the stream and of a result entry on a result stream.
namespace remote_fields {
constexpr const char* kId = "id";                // "<client id>:<sequence>", unique per request
constexpr const char* kReply = "reply";          // the client's result stream, "<stream>:results:<client id>"
constexpr const char* kDeadline = "deadline";    // absolute unix time in seconds (decimal)
constexpr const char* kReference = "reference";  // "interleaved" | "cached" (RemoteEvaluatorConfig)
constexpr const char* kRequest = "request";      // encode_request() bytes
constexpr const char* kResult = "result";        // encode_result() bytes
constexpr const char* kWorker = "worker";        // the consumer that evaluated it
}  // namespace remote_fields

// The client side: a KernelEvaluator whose evaluate() submits the batch to the stream and collects
// the results. Not re-entrant: concurrent evaluate() calls are serialised.
class RemoteEvaluator : public KernelEvaluator {
 public:
  // Connects at once; throws turnrl::Error naming evaluator.remote.redis_url when it cannot.
  explicit RemoteEvaluator(RemoteEvaluatorConfig config);
  ~RemoteEvaluator() override;

  // Results in request order, each exactly once; unanswered by the deadline -> EvalError::timeout.
  // Throws turnrl::Error only when Redis cannot be reached to submit the batch (after one retry on
  // a new connection, so a Redis restart between batches costs nothing).
  std::vector<EvalResult> evaluate(const std::vector<EvalRequest>& requests) override;

  const RemoteEvaluatorConfig& config() const { return config_; }
  const std::string& client_id() const { return client_id_; }
  int64_t duplicates_dropped() const { return duplicates_; }  // results of reclaimed tasks seen twice
  int64_t timeouts() const { return timeouts_; }              // requests answered by the deadline rule

 private:
  RemoteEvaluatorConfig config_;
  std::string client_id_;
  std::unique_ptr<RedisConnection> redis_;
  std::mutex mu_;
  uint64_t sequence_ = 0;
  std::atomic<int64_t> duplicates_{0}, timeouts_{0};
};

// The factory's branch for backend "remote" (backends.h).
std::shared_ptr<KernelEvaluator> make_remote_evaluator(const EvaluatorConfig& config);

// Bounds a worker checks on every request before evaluating it: a request outside them is
// answered with an `internal` result naming the field, its value and the limit, so that no client
// (buggy or hostile) makes a worker run 1e5 trials or hold a request for years.
struct RemoteRequestLimits {
  int max_correctness_trials = 1000;   // >= 1
  int max_timing_trials = 10000;       // >= 1
  size_t max_candidate_bytes = 4 << 20;
  size_t max_task_bytes = 256;
  double max_deadline_seconds = 1e7;   // ahead of now; evaluator.remote.deadline_seconds' upper bound
};

// The worker side: serves the stream with a local evaluator (cpu, cuda or python backend).
struct RemoteWorkerOptions {
  std::string group = "turnrl-eval-workers";  // consumer group shared by all workers of a stream
  std::string name;      // consumer name, unique per worker; "" = <hostname>-<pid>
  int batch = 0;         // requests read and evaluated at once; 0 = the local pool size
  double block_seconds = 1;  // longest blocking read, so that a stop request is seen quickly
  RemoteRequestLimits limits;
};

struct RemoteWorkerStats {
  int64_t evaluated = 0;  // results stored
  int64_t reclaimed = 0;  // requests claimed from other (dead or slow) workers
  int64_t malformed = 0;  // entries rejected (logged; answered when they carried an id)
  int64_t expired = 0;    // requests skipped because their deadline had passed
  int64_t out_of_limits = 0;  // requests answered with an error for a field outside RemoteRequestLimits
  int64_t poison = 0;     // requests delivered more than max_deliveries times, answered as crashes
  int64_t store_failures = 0;  // result writes Redis refused (left pending, retried until the deadline)
  int64_t groups_recreated = 0;  // consumer groups created again after NOGROUP (FLUSHALL, restart)
  int64_t reference_hits = 0, reference_misses = 0;  // cached-reference requests
};

class RemoteWorker {
 public:
  // config.backend is the local backend (not "remote"); config.remote names the Redis server,
  // the stream, the visibility timeout and the result TTL. Connects and creates the group.
  RemoteWorker(EvaluatorConfig config, RemoteWorkerOptions options = {});
  ~RemoteWorker();

  // Serves until `stop` becomes true (checked at least every block_seconds); the batch in hand
  // is finished and acknowledged first. Lost Redis connections are retried, not fatal.
  void serve(const std::atomic<bool>& stop);

  const RemoteWorkerOptions& options() const;
  RemoteWorkerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace turnrl
