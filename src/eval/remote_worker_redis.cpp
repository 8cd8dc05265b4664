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
#include "turnrl/eval/cpu_tasks.h"
#include "turnrl/eval/eval_codec.h"
#include "turnrl/eval/redis_connection.h"
#include "turnrl/eval/reference_timing_cache.h"
#include "turnrl/eval/remote_backend.h"

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

  void create_group();
  void claim();
  void process(const std::vector<RedisReply>& entries);
  void evaluate_and_store(std::vector<Entry>& entries, bool candidate_only_pool,
                          const std::vector<std::optional<ReferenceTimingKey>>& keys,
                          const std::vector<TimingStats>& cached);
  void store(const std::vector<std::vector<std::string>>& cmds);
  std::vector<std::string> result_command(const Entry& e, const EvalResult& r) const;
  std::vector<std::vector<std::string>> done_commands(const Entry& e) const;
  std::optional<ReferenceTimingKey> reference_key(const Entry& e);
};

void RemoteWorker::Impl::create_group() {
  // Id 0: a fresh group also serves requests queued before any worker existed.
  const RedisReply r = redis->call({"XGROUP", "CREATE", config.remote.stream, opt.group, "0", "MKSTREAM"});
  if (r.is_error() && r.str.rfind("BUSYGROUP", 0) != 0) fail("redis {}: XGROUP CREATE: {}", redis->url(), r.str);
}

std::vector<std::string> RemoteWorker::Impl::result_command(const Entry& e, const EvalResult& r) const {
  return {"XADD", e.reply, "*", f::kId, e.id, f::kResult, encode_result(r), f::kWorker, opt.name};
}

// The result's stream expires result_ttl after its last write; then the request is acknowledged
// and removed. Redis runs one connection's commands in order, so the acknowledgement can never
// precede the stored result, even if this process dies half-way through the pipeline.
std::vector<std::vector<std::string>> RemoteWorker::Impl::done_commands(const Entry& e) const {
  std::vector<std::vector<std::string>> cmds;
  if (!e.reply.empty())
    cmds.push_back({"PEXPIRE", e.reply, std::to_string(int64_t(config.remote.result_ttl_seconds * 1000))});
  cmds.push_back({"XACK", config.remote.stream, opt.group, e.entry_id});
  cmds.push_back({"XDEL", config.remote.stream, e.entry_id});
  return cmds;
}

void RemoteWorker::Impl::store(const std::vector<std::vector<std::string>>& cmds) {
  if (cmds.empty()) return;
  const auto replies = redis->pipeline(cmds, 30);
  for (size_t k = 0; k < replies.size(); ++k)
    if (replies[k].is_error()) log(fmt::format("{} {} failed: {}", cmds[k][0], cmds[k][1], replies[k].str));
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

void RemoteWorker::Impl::evaluate_and_store(std::vector<Entry>& entries, bool use_candidate_only,
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
  std::vector<std::vector<std::string>> cmds;
  for (size_t i = 0; i < entries.size(); ++i) {
    EvalResult& r = results[i];
    if (use_candidate_only) {
      apply_reference_timing(r, cached[i]);
    } else if (keys[i] && r.reference_time.trials > 0) {  // a miss: this measurement may become the entry
      apply_reference_timing(r, reference_cache->store(*keys[i], r.reference_time));
    }
    cmds.push_back(result_command(entries[i], r));
    for (auto& c : done_commands(entries[i])) cmds.push_back(std::move(c));
  }
  store(cmds);
  count(&RemoteWorkerStats::evaluated, int64_t(entries.size()));
}

void RemoteWorker::Impl::process(const std::vector<RedisReply>& raw) {
  std::vector<std::vector<std::string>> cmds;
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
      if (e.answerable()) {
        EvalResult r;
        r.error = EvalError::internal;
        r.message = "eval-worker rejected the request: " + e.problem;
        cmds.push_back(result_command(e, r));
      } else {
        e.reply.clear();
      }
      for (auto& c : done_commands(e)) cmds.push_back(std::move(c));
      continue;
    }
    if (e.deadline < now) {  // the client has already answered it with a timeout
      ++expired;
      e.reply.clear();
      for (auto& c : done_commands(e)) cmds.push_back(std::move(c));
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
  store(cmds);
  // Misses first: their reference timings become the cache entries the hits of later batches use.
  evaluate_and_store(full, false, full_keys, {});
  evaluate_and_store(hits, true, {}, hit_stats);
}

void RemoteWorker::Impl::claim() {
  const std::string min_idle = std::to_string(int64_t(config.remote.visibility_timeout_seconds * 1000));
  const RedisReply r = redis->command({"XAUTOCLAIM", config.remote.stream, opt.group, opt.name, min_idle, claim_cursor,
                                       "COUNT", std::to_string(opt.batch)});
  if (r.type != RedisReply::Type::array || r.elements.size() < 2) return;
  claim_cursor = r.elements[0].str.empty() ? "0-0" : r.elements[0].str;
  if (claim_cursor == "0-0") last_claim = Clock::now();  // a full pass over the pending list
  std::vector<RedisReply> entries;
  std::vector<std::vector<std::string>> deleted;
  for (const auto& e : r.elements[1].elements) {
    if (e.type == RedisReply::Type::array && e.elements.size() >= 2 && e.elements[1].type == RedisReply::Type::array)
      entries.push_back(e);
    else if (e.type == RedisReply::Type::array && !e.elements.empty())  // deleted meanwhile (Redis 6.2 form)
      deleted.push_back({"XACK", config.remote.stream, opt.group, e.elements[0].str});
  }
  store(deleted);
  if (entries.empty()) return;
  count(&RemoteWorkerStats::reclaimed, int64_t(entries.size()));
  log(fmt::format("claimed {} requests idle for more than {} s (their worker died or stalled)", entries.size(),
                  config.remote.visibility_timeout_seconds));
  process(entries);
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
      if (m.claim_cursor != "0-0" || seconds_since(m.last_claim) >= m.claim_interval()) m.claim();
      const RedisReply r = m.redis->call({"XREADGROUP", "GROUP", m.opt.group, m.opt.name, "COUNT",
                                          std::to_string(m.opt.batch), "BLOCK", block_ms, "STREAMS",
                                          m.config.remote.stream, ">"},
                                         m.opt.block_seconds + 10);
      if (r.is_error()) {
        if (r.str.rfind("NOGROUP", 0) == 0) {  // the stream was deleted (e.g. FLUSHALL): start over
          m.create_group();
          continue;
        }
        fail("redis {}: XREADGROUP: {}", m.redis->url(), r.str);
      }
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
  m.log(fmt::format("stopping: {} evaluated, {} reclaimed, {} malformed, {} past their deadline; reference cache {} "
                    "hits, {} misses",
                    s.evaluated, s.reclaimed, s.malformed, s.expired, s.reference_hits, s.reference_misses));
}

}  // namespace turnrl
