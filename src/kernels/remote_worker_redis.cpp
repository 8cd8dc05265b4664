// The remote evaluator's worker side (remote_backend.h): serve the request stream through a
// consumer group with a local evaluator pool; store each result, then acknowledge; reclaim
// requests left pending by dead workers; reject malformed entries without stopping.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "turnrl/core/error.h"
#include "turnrl/kernels/cpu_tasks.h"
#include "turnrl/kernels/eval_codec.h"
#include "turnrl/kernels/redis_connection.h"
#include "turnrl/kernels/reference_timing_cache.h"
#include "turnrl/kernels/remote_backend.h"

namespace turnrl {
namespace {

namespace f = remote_fields;
using Clock = std::chrono::steady_clock;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string default_name() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::snprintf(host, sizeof host, "host");
  return fmt::format("{}-{}", host, getpid());
}

// One request entry as read from the stream. `problem` is set when it is malformed; `id` and
// `reply` are then still usable when answerable() (a result can tell the client why).
struct Entry {
  std::string entry_id;
  std::string id, reply;
  double deadline = 0;
  bool cached_reference = false;
  EvalRequest request;
  std::string problem;
  bool answerable() const { return !id.empty() && !reply.empty(); }
};

Entry parse_entry(const RedisReply& raw, const std::string& stream) {
  Entry e;
  if (raw.type != RedisReply::Type::array || raw.elements.size() < 2) {
    e.problem = "not an [id, fields] pair";
    return e;
  }
  e.entry_id = raw.elements[0].str;
  const RedisReply& fields = raw.elements[1];
  if (fields.type != RedisReply::Type::array || fields.elements.size() % 2 != 0) {
    e.problem = "fields are not name/value pairs";
    return e;
  }
  auto get = [&](const char* name) -> const std::string* {
    for (size_t k = 0; k + 1 < fields.elements.size(); k += 2)
      if (fields.elements[k].str == name) return &fields.elements[k + 1].str;
    return nullptr;
  };
  const std::string reply_prefix = stream + ":results:";
  if (const std::string* id = get(f::kId); id && !id->empty() && id->size() <= 512) e.id = *id;
  if (const std::string* reply = get(f::kReply); reply && reply->rfind(reply_prefix, 0) == 0 && reply->size() > reply_prefix.size())
    e.reply = *reply;
  if (e.id.empty()) {
    e.problem = fmt::format("field '{}' missing, empty or longer than 512 bytes", f::kId);
    return e;
  }
  if (e.reply.empty()) {
    e.problem = fmt::format("field '{}' missing or not a result stream of this stream ('{}<client>')", f::kReply, reply_prefix);
    return e;
  }
  const std::string* deadline = get(f::kDeadline);
  char* end = nullptr;
  if (deadline) e.deadline = std::strtod(deadline->c_str(), &end);
  if (!deadline || deadline->empty() || *end != '\0' || !std::isfinite(e.deadline)) {
    e.problem = fmt::format("field '{}' missing or not a unix time in seconds", f::kDeadline);
    return e;
  }
  if (const std::string* ref = get(f::kReference)) {
    if (*ref != "interleaved" && *ref != "cached") {
      e.problem = fmt::format("field '{}' is '{}'; allowed: interleaved, cached", f::kReference, *ref);
      return e;
    }
    e.cached_reference = *ref == "cached";
  }
  const std::string* bytes = get(f::kRequest);
  if (!bytes) {
    e.problem = fmt::format("field '{}' missing", f::kRequest);
    return e;
  }
  try {
    e.request = decode_request(*bytes);
  } catch (const Error& err) {
    e.problem = err.what();
  }
  return e;
}

// Why a well-formed request is outside the worker's limits, or "" when it is within them.
std::string limit_problem(const Entry& e, const RemoteRequestLimits& limits, double now) {
  const EvalRequest& r = e.request;
  auto out_of = [](const char* field, auto value, auto lo, auto hi) {
    return fmt::format("field '{}' is {}; allowed: [{}, {}]", field, value, lo, hi);
  };
  if (r.correctness_trials < 1 || r.correctness_trials > limits.max_correctness_trials)
    return out_of("correctness_trials", r.correctness_trials, 1, limits.max_correctness_trials);
  if (r.timing_trials < 1 || r.timing_trials > limits.max_timing_trials)
    return out_of("timing_trials", r.timing_trials, 1, limits.max_timing_trials);
  if (r.candidate.size() > limits.max_candidate_bytes)
    return fmt::format("field 'candidate' is {} bytes; allowed: at most {}", r.candidate.size(), limits.max_candidate_bytes);
  if (r.task.empty() || r.task.size() > limits.max_task_bytes)
    return fmt::format("field 'task' is {} bytes; allowed: 1 to {}", r.task.size(), limits.max_task_bytes);
  if (e.deadline > now + limits.max_deadline_seconds)
    return fmt::format("field '{}' is {:.0f} s ahead; allowed: at most {} s", f::kDeadline, e.deadline - now,
                       limits.max_deadline_seconds);
  return "";
}

// A request's answer on its way out: the encoded result to store first (none for requests past
// their deadline or without a usable reply stream), then the acknowledgement.
struct Answer {
  Entry entry;
  std::optional<std::string> result;
  bool refused = false;  // Redis refused to store it before: retried quietly (logged once)
};

EvalResult error_result(EvalError error, std::string message) {
  EvalResult r;
  r.error = error;
  r.message = std::move(message);
  return r;
}

}  // namespace

struct RemoteWorker::Impl {
  EvaluatorConfig config;
  RemoteWorkerOptions opt;
  std::unique_ptr<RedisConnection> redis;
  std::shared_ptr<KernelEvaluator> evaluator;
  // Cached-reference requests on the cpu backend: a second pool (started lazily) that times the
  // candidate only, and the shared cache of reference timings.
  std::shared_ptr<CpuEvaluator> candidate_only;
  std::unique_ptr<ReferenceTimingCache> reference_cache;
  std::string device_kind;
  bool warned_reference_backend = false;

  mutable std::mutex stats_mu;
  RemoteWorkerStats stats;
  Clock::time_point last_claim{};
  std::string claim_cursor = "0-0";
  std::string last_error;

  double claim_interval() const { return std::clamp(config.remote.visibility_timeout_seconds / 4, 0.1, 5.0); }
  void log(const std::string& message) const { fmt::print(stderr, "turnrl eval-worker {}: {}\n", opt.name, message); }
  void count(int64_t RemoteWorkerStats::*field, int64_t n = 1) {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.*field += n;
  }

  // Answers whose result Redis refused to store: their requests stay pending (unacknowledged),
  // and answer() is retried with them until their deadline passes.
  std::vector<Answer> unstored;

  void create_group();
  bool recreated_group(const RedisReply& reply);
  void claim();
  std::vector<RedisReply> answer_poison(const std::vector<RedisReply>& claimed);
  void process(const std::vector<RedisReply>& entries);
  void evaluate_and_answer(std::vector<Entry>& entries, bool candidate_only_pool,
                           const std::vector<std::optional<ReferenceTimingKey>>& keys,
                           const std::vector<TimingStats>& cached);
  void answer(std::vector<Answer> answers);
  void retry_unstored();
  void acknowledge(const std::vector<std::string>& entry_ids);
  std::optional<ReferenceTimingKey> reference_key(const Entry& e);
};

void RemoteWorker::Impl::create_group() {
  // Id 0: a fresh group also serves requests queued before any worker existed.
  const RedisReply r = redis->call({"XGROUP", "CREATE", config.remote.stream, opt.group, "0", "MKSTREAM"});
  if (r.is_error() && r.str.rfind("BUSYGROUP", 0) != 0) fail("redis {}: XGROUP CREATE: {}", redis->url(), r.str);
}

// NOGROUP: the group (and the stream) went away under us, by FLUSHALL or a Redis restart without
// persistence. Every command that names the group can see it; each creates the group again and
// carries on (the pending list went with it: nothing is left to reclaim).
bool RemoteWorker::Impl::recreated_group(const RedisReply& reply) {
  if (!reply.is_error() || reply.str.rfind("NOGROUP", 0) != 0) return false;
  log(fmt::format("consumer group '{}' on '{}' is gone ({}); creating it again", opt.group, config.remote.stream, reply.str));
  create_group();
  count(&RemoteWorkerStats::groups_recreated);
  return true;
}

void RemoteWorker::Impl::acknowledge(const std::vector<std::string>& entry_ids) {
  if (entry_ids.empty()) return;
  std::vector<std::string> xack = {"XACK", config.remote.stream, opt.group};
  std::vector<std::string> xdel = {"XDEL", config.remote.stream};
  xack.insert(xack.end(), entry_ids.begin(), entry_ids.end());
  xdel.insert(xdel.end(), entry_ids.begin(), entry_ids.end());
  const auto replies = redis->pipeline({xack, xdel}, 30);
  if (recreated_group(replies[0])) return;  // the requests went with the group
  for (size_t k = 0; k < replies.size(); ++k)
    if (replies[k].is_error()) log(fmt::format("{} of {} requests failed: {}", k == 0 ? "XACK" : "XDEL", entry_ids.size(), replies[k].str));
}

// Stores each answer's result (the result stream expires result_ttl after its last write), then
// acknowledges and removes exactly the requests whose result is stored. A refused write (OOM under
// maxmemory, a reply key of another type) leaves its request pending: it is kept in `unstored`,
// retried on the next rounds and re-claimed from this worker by nobody meanwhile (XCLAIM JUSTID
// resets its idle time without counting a delivery).
void RemoteWorker::Impl::answer(std::vector<Answer> answers) {
  std::vector<std::vector<std::string>> writes;
  for (const Answer& a : answers) {
    if (!a.result) continue;
    writes.push_back({"XADD", a.entry.reply, "*", f::kId, a.entry.id, f::kResult, *a.result, f::kWorker, opt.name});
    writes.push_back({"PEXPIRE", a.entry.reply, std::to_string(int64_t(config.remote.result_ttl_seconds * 1000))});
  }
  const auto replies = redis->pipeline(writes, 30);
  std::vector<std::string> done;
  size_t k = 0;
  for (Answer& a : answers) {
    if (a.result && replies[k].is_error()) {
      if (!a.refused) {
        count(&RemoteWorkerStats::store_failures);
        log(fmt::format("Redis refused the result of request {} (entry {}) on '{}': {}; the request stays pending "
                        "and the write is retried until its deadline",
                        a.entry.id, a.entry.entry_id, a.entry.reply, replies[k].str));
      }
      a.refused = true;
      unstored.push_back(std::move(a));
    } else {
      done.push_back(a.entry.entry_id);
    }
    if (a.result) k += 2;
  }
  acknowledge(done);
}

void RemoteWorker::Impl::retry_unstored() {
  if (unstored.empty()) return;
  std::vector<Answer> retry, given_up;
  const double now = unix_now();
  for (Answer& a : unstored) (a.entry.deadline < now ? given_up : retry).push_back(std::move(a));
  unstored.clear();
  for (const Answer& a : given_up)  // pending until a claim sees it past its deadline and acknowledges it
    log(fmt::format("gave up storing the result of request {}: its deadline passed (the client has answered it with a "
                    "timeout)",
                    a.entry.id));
  if (retry.empty()) return;
  std::vector<std::vector<std::string>> keep;
  for (const Answer& a : retry)
    keep.push_back({"XCLAIM", config.remote.stream, opt.group, opt.name, "0", a.entry.entry_id, "JUSTID"});
  for (const RedisReply& r : redis->pipeline(keep, 10)) recreated_group(r);  // the client may still wait: answer
  answer(std::move(retry));
}

std::optional<ReferenceTimingKey> RemoteWorker::Impl::reference_key(const Entry& e) {
  if (!e.cached_reference) return std::nullopt;
  auto* cpu = dynamic_cast<CpuEvaluator*>(evaluator.get());
  if (!cpu) {
    if (!warned_reference_backend)
      log(fmt::format("cached reference timing is built for the cpu backend only; backend {} times the reference itself",
                      config.backend));
    warned_reference_backend = true;
    return std::nullopt;
  }
  if (!has_cpu_task(e.request.task)) return std::nullopt;  // the backend reports the unknown task
  if (device_kind.empty()) device_kind = cpu_device_kind();
  return ReferenceTimingKey{e.request.task, cpu_task_fingerprint(e.request.task, cpu->options()), device_kind};
}

void RemoteWorker::Impl::evaluate_and_answer(std::vector<Entry>& entries, bool use_candidate_only,
                                            const std::vector<std::optional<ReferenceTimingKey>>& keys,
                                            const std::vector<TimingStats>& cached) {
  if (entries.empty()) return;
  std::vector<EvalRequest> requests;
  for (const auto& e : entries) requests.push_back(e.request);
  std::vector<EvalResult> results;
  if (use_candidate_only) {
    if (!candidate_only) {
      CpuEvalOptions o = dynamic_cast<CpuEvaluator&>(*evaluator).options();
      o.time_reference = false;
      candidate_only = std::make_shared<CpuEvaluator>(o);
    }
    results = candidate_only->evaluate(requests);
  } else {
    results = evaluator->evaluate(requests);
  }
  std::vector<Answer> answers;
  for (size_t i = 0; i < entries.size(); ++i) {
    EvalResult& r = results[i];
    if (use_candidate_only) {
      apply_reference_timing(r, cached[i]);
    } else if (keys[i] && r.reference_time.trials > 0) {  // a miss: this measurement may become the entry
      apply_reference_timing(r, reference_cache->store(*keys[i], r.reference_time));
    }
    answers.push_back({std::move(entries[i]), encode_result(r)});
  }
  count(&RemoteWorkerStats::evaluated, int64_t(entries.size()));
  answer(std::move(answers));
}

void RemoteWorker::Impl::process(const std::vector<RedisReply>& raw) {
  std::vector<Answer> answers;
  std::vector<Entry> full, hits;
  std::vector<std::optional<ReferenceTimingKey>> full_keys;
  std::vector<TimingStats> hit_stats;
  int64_t expired = 0;
  const double now = unix_now();
  for (const auto& item : raw) {
    Entry e = parse_entry(item, config.remote.stream);
    if (e.entry_id.empty()) continue;
    if (!e.problem.empty()) {
      count(&RemoteWorkerStats::malformed);
      log(fmt::format("rejected malformed entry {} on '{}': {}{}", e.entry_id, config.remote.stream, e.problem,
                      e.answerable() ? " (answered with an internal error)" : " (no usable id: dropped)"));
      std::optional<std::string> result;
      if (e.answerable())
        result = encode_result(error_result(EvalError::internal, "eval-worker rejected the request: " + e.problem));
      answers.push_back({std::move(e), std::move(result)});
      continue;
    }
    if (e.deadline < now) {  // the client has already answered it with a timeout
      ++expired;
      answers.push_back({std::move(e), std::nullopt});
      continue;
    }
    if (const std::string problem = limit_problem(e, opt.limits, now); !problem.empty()) {
      count(&RemoteWorkerStats::out_of_limits);
      log(fmt::format("rejected request {} (entry {}): {}", e.id, e.entry_id, problem));
      const std::string message = "eval-worker rejected the request: " + problem;
      answers.push_back({std::move(e), encode_result(error_result(EvalError::internal, message))});
      continue;
    }
    std::optional<ReferenceTimingKey> key = reference_key(e);
    std::optional<TimingStats> hit = key ? reference_cache->find(*key) : std::nullopt;
    if (key) count(hit ? &RemoteWorkerStats::reference_hits : &RemoteWorkerStats::reference_misses);
    if (hit) {
      hits.push_back(std::move(e));
      hit_stats.push_back(*hit);
    } else {
      full.push_back(std::move(e));
      full_keys.push_back(key);
    }
  }
  if (expired > 0) {
    count(&RemoteWorkerStats::expired, expired);
    log(fmt::format("skipped {} requests past their deadline", expired));
  }
  answer(std::move(answers));
  // Misses first: their reference timings become the cache entries the hits of later batches use.
  evaluate_and_answer(full, false, full_keys, {});
  evaluate_and_answer(hits, true, {}, hit_stats);
}

void RemoteWorker::Impl::claim() {
  const std::string min_idle = std::to_string(int64_t(config.remote.visibility_timeout_seconds * 1000));
  const RedisReply r = redis->call({"XAUTOCLAIM", config.remote.stream, opt.group, opt.name, min_idle, claim_cursor,
                                    "COUNT", std::to_string(opt.batch)});
  if (recreated_group(r)) {
    claim_cursor = "0-0";
    return;
  }
  if (r.is_error()) fail("redis {}: XAUTOCLAIM: {}", redis->url(), r.str);
  if (r.type != RedisReply::Type::array || r.elements.size() < 2) return;
  claim_cursor = r.elements[0].str.empty() ? "0-0" : r.elements[0].str;
  if (claim_cursor == "0-0") last_claim = Clock::now();  // a full pass over the pending list
  std::vector<RedisReply> entries;
  std::vector<std::string> deleted;
  for (const auto& e : r.elements[1].elements) {
    if (e.type == RedisReply::Type::array && e.elements.size() >= 2 && e.elements[1].type == RedisReply::Type::array)
      entries.push_back(e);
    else if (e.type == RedisReply::Type::array && !e.elements.empty())  // deleted meanwhile (Redis 6.2 form)
      deleted.push_back(e.elements[0].str);
  }
  acknowledge(deleted);
  if (entries.empty()) return;
  count(&RemoteWorkerStats::reclaimed, int64_t(entries.size()));
  log(fmt::format("claimed {} requests idle for more than {} s (their worker died or stalled)", entries.size(),
                  config.remote.visibility_timeout_seconds));
  process(answer_poison(entries));
}

// XAUTOCLAIM counted one more delivery for each claimed request; XPENDING tells how many there
// were. A request its workers never answered max_deliveries times in a row is taking them down
// (a candidate that kills its evaluator): it gets a crash result instead of another evaluation.
std::vector<RedisReply> RemoteWorker::Impl::answer_poison(const std::vector<RedisReply>& claimed) {
  std::vector<std::vector<std::string>> queries;
  for (const auto& e : claimed)
    queries.push_back({"XPENDING", config.remote.stream, opt.group, e.elements[0].str, e.elements[0].str, "1"});
  const auto replies = redis->pipeline(queries, 10);
  std::vector<RedisReply> healthy;
  std::vector<Answer> poison;
  for (size_t i = 0; i < claimed.size(); ++i) {
    const RedisReply& p = replies[i];
    const int64_t deliveries = p.type == RedisReply::Type::array && !p.elements.empty() && p.elements[0].elements.size() >= 4
                                   ? p.elements[0].elements[3].integer
                                   : 0;
    if (deliveries <= config.remote.max_deliveries) {
      healthy.push_back(claimed[i]);
      continue;
    }
    Entry e = parse_entry(claimed[i], config.remote.stream);
    count(&RemoteWorkerStats::poison);
    const std::string message = fmt::format(
        "the request was delivered {} times and no eval-worker lived to answer it (evaluator.remote.max_deliveries: "
        "{}): its evaluation takes its worker down, so it is answered as a crash and not evaluated again",
        deliveries, config.remote.max_deliveries);
    log(fmt::format("request {} (entry {}): {}", e.id, e.entry_id, message));
    std::optional<std::string> result;
    if (e.answerable()) result = encode_result(error_result(EvalError::crash, message));
    poison.push_back({std::move(e), std::move(result)});
  }
  answer(std::move(poison));
  return healthy;
}

RemoteWorker::RemoteWorker(EvaluatorConfig config, RemoteWorkerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.config = std::move(config);
  m.opt = std::move(options);
  if (m.config.backend == "remote")
    fail("eval-worker --backend: 'remote' would forward to itself; allowed: the local backends ({})",
         fmt::join(built_evaluator_backends(), ", "));
  if (m.config.remote.stream.empty()) fail("evaluator.remote.stream: must not be empty");
  if (m.opt.group.empty()) fail("eval-worker --group: must not be empty");
  if (m.opt.name.empty()) m.opt.name = default_name();
  if (m.opt.batch <= 0)
    m.opt.batch = m.config.workers > 0 ? int(m.config.workers) : int(std::max(1u, std::thread::hardware_concurrency()));
  if (!(m.opt.block_seconds > 0)) fail("eval-worker block_seconds: {} must be > 0", m.opt.block_seconds);
  parse_redis_url(m.config.remote.redis_url, "evaluator.remote.redis_url");
  m.evaluator = make_evaluator(m.config);
  m.redis = std::make_unique<RedisConnection>(m.config.remote.redis_url);
  m.reference_cache = std::make_unique<ReferenceTimingCache>(m.redis.get(), m.config.remote.stream,
                                                             m.config.remote.reference_ttl_seconds);
  m.create_group();
}

RemoteWorker::~RemoteWorker() = default;

const RemoteWorkerOptions& RemoteWorker::options() const { return impl_->opt; }

RemoteWorkerStats RemoteWorker::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->stats;
}

void RemoteWorker::serve(const std::atomic<bool>& stop) {
  Impl& m = *impl_;
  const std::string block_ms = std::to_string(std::max<int64_t>(1, int64_t(m.opt.block_seconds * 1000)));
  m.log(fmt::format("serving stream '{}' (group '{}') at {} with backend {}, batches of {}; visibility timeout {} s, "
                    "result TTL {} s",
                    m.config.remote.stream, m.opt.group, m.config.remote.redis_url, m.config.backend, m.opt.batch,
                    m.config.remote.visibility_timeout_seconds, m.config.remote.result_ttl_seconds));
  while (!stop.load()) {
    try {
      m.retry_unstored();
      if (m.claim_cursor != "0-0" || seconds_since(m.last_claim) >= m.claim_interval()) m.claim();
      const RedisReply r = m.redis->call({"XREADGROUP", "GROUP", m.opt.group, m.opt.name, "COUNT",
                                          std::to_string(m.opt.batch), "BLOCK", block_ms, "STREAMS",
                                          m.config.remote.stream, ">"},
                                         m.opt.block_seconds + 10);
      if (m.recreated_group(r)) continue;
      if (r.is_error()) fail("redis {}: XREADGROUP: {}", m.redis->url(), r.str);
      if (r.type == RedisReply::Type::array)
        for (const auto& stream : r.elements)
          if (stream.elements.size() >= 2) m.process(stream.elements[1].elements);
      m.last_error.clear();
    } catch (const std::exception& e) {  // Redis down or restarting: keep trying; pending work is reclaimed
      if (m.last_error != e.what()) m.log(fmt::format("{} (retrying)", e.what()));
      m.last_error = e.what();
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  const RemoteWorkerStats s = stats();
  m.log(fmt::format("stopping: {} evaluated, {} reclaimed, {} malformed, {} out of limits, {} past their deadline, {} "
                    "answered as poison, {} result writes refused, {} groups recreated; reference cache {} hits, {} "
                    "misses",
                    s.evaluated, s.reclaimed, s.malformed, s.out_of_limits, s.expired, s.poison, s.store_failures,
                    s.groups_recreated, s.reference_hits, s.reference_misses));
  if (!m.unstored.empty())
    m.log(fmt::format("{} results were never stored; their requests stay pending for another worker", m.unstored.size()));
}

}  // namespace turnrl
