// The remote evaluator's client side (remote_backend.h): submit a batch to the request stream,
// collect the results from this client's result stream, bounded by the requests' deadline.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <unordered_map>

#include "turnrl/core/error.h"
#include "turnrl/kernels/eval_codec.h"
#include "turnrl/kernels/redis_connection.h"
#include "turnrl/kernels/remote_backend.h"

namespace turnrl {
namespace {

namespace f = remote_fields;
using Clock = std::chrono::steady_clock;

constexpr size_t kSubmitChunk = 256;  // XADDs per round trip
constexpr double kLongestBlock = 2;   // seconds; a blocking read never outlives the deadline by more

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string make_client_id() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::snprintf(host, sizeof host, "host");
  std::random_device rd;
  return fmt::format("{}-{}-{:08x}", host, getpid(), rd());
}

const std::string* field(const RedisReply& fields, const char* name) {
  for (size_t k = 0; k + 1 < fields.elements.size(); k += 2)
    if (fields.elements[k].str == name) return &fields.elements[k + 1].str;
  return nullptr;
}

}  // namespace

RemoteEvaluator::RemoteEvaluator(RemoteEvaluatorConfig config) : config_(std::move(config)) {
  parse_redis_url(config_.redis_url, "evaluator.remote.redis_url");
  if (config_.stream.empty()) fail("evaluator.remote.stream: must not be empty");
  client_id_ = make_client_id();
  try {
    redis_ = std::make_unique<RedisConnection>(config_.redis_url);
  } catch (const Error& e) {
    fail("evaluator.remote.redis_url: {}", e.what());
  }
}

RemoteEvaluator::~RemoteEvaluator() = default;

std::vector<EvalResult> RemoteEvaluator::evaluate(const std::vector<EvalRequest>& requests) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = requests.size();
  if (n == 0) return {};
  const std::string reply_key = config_.stream + ":results:" + client_id_;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(config_.deadline_seconds));
  const std::string unix_deadline = fmt::format("{:.3f}", unix_now() + config_.deadline_seconds);
  const char* reference = config_.cached_reference_timing ? "cached" : "interleaved";

  // Submit. The request id is unique across clients and calls, so results of an earlier call that
  // arrive late are recognised and dropped.
  std::unordered_map<std::string, size_t> position;
  std::vector<std::string> entry_ids(n);
  for (size_t begin = 0; begin < n; begin += kSubmitChunk) {
    std::vector<std::vector<std::string>> cmds;
    for (size_t i = begin; i < std::min(n, begin + kSubmitChunk); ++i) {
      const std::string id = fmt::format("{}:{}", client_id_, ++sequence_);
      position[id] = i;
      cmds.push_back({"XADD", config_.stream, "*", f::kId, id, f::kReply, reply_key, f::kDeadline, unix_deadline,
                      f::kReference, reference, f::kRequest, encode_request(requests[i])});
    }
    std::vector<RedisReply> replies;
    try {
      replies = redis_->pipeline(cmds, 30);
    } catch (const Error& e) {
      // The connection may have broken since the last batch (Redis restarted): one more try on a
      // fresh one. Entries that reached Redis the first time carry the same ids, so their results
      // are recognised and counted once.
      fmt::print(stderr, "turnrl remote evaluator: {} (submitting again on a new connection)\n", e.what());
      replies = redis_->pipeline(cmds, 30);
    }
    for (size_t k = 0; k < replies.size(); ++k) {
      if (replies[k].is_error())
        fail("evaluator.remote: XADD to stream '{}' at {} failed: {}", config_.stream, config_.redis_url, replies[k].str);
      entry_ids[begin + k] = replies[k].str;
    }
  }

  // Collect until every request has its result or the deadline passes.
  std::vector<EvalResult> results(n);
  std::vector<char> done(n, 0);
  size_t remaining = n;
  std::string last_seen = "0-0";
  std::string last_error, unreadable;
  while (remaining > 0 && unreadable.empty()) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) break;
    const int64_t block_ms = std::max<int64_t>(1, int64_t(std::min(left, kLongestBlock) * 1000));
    RedisReply reply;
    try {
      reply = redis_->call({"XREAD", "COUNT", "1024", "BLOCK", std::to_string(block_ms), "STREAMS", reply_key, last_seen},
                           double(block_ms) / 1000 + 10);
      // A key of another type under our result stream's name never heals by waiting (and no worker
      // can store a result there): say so now. Other error replies (LOADING, ...) are retried.
      if (reply.is_error() && reply.str.rfind("WRONGTYPE", 0) == 0) {
        unreadable = reply.str;
        break;
      }
      if (reply.is_error()) fail("redis {}: XREAD: {}", config_.redis_url, reply.str);
    } catch (const Error& e) {  // Redis restarting or unreachable: retry (reconnecting) until the deadline
      if (last_error != e.what()) fmt::print(stderr, "turnrl remote evaluator: {} (retrying until the deadline)\n", e.what());
      last_error = e.what();
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(block_ms, 200)));
      continue;
    }
    if (reply.type != RedisReply::Type::array) continue;  // nil: nothing arrived within block_ms
    for (const auto& stream : reply.elements) {
      if (stream.elements.size() < 2) continue;
      for (const auto& entry : stream.elements[1].elements) {
        if (entry.elements.size() < 2) continue;
        last_seen = entry.elements[0].str;
        const std::string* id = field(entry.elements[1], f::kId);
        const std::string* bytes = field(entry.elements[1], f::kResult);
        const auto it = id ? position.find(*id) : position.end();
        if (it == position.end() || !bytes) continue;  // an earlier call's late result
        const size_t i = it->second;
        if (done[i]) {  // a reclaimed task evaluated twice: the caller sees it once
          ++duplicates_;
          continue;
        }
        try {
          results[i] = decode_result(*bytes);
        } catch (const Error& e) {
          const std::string* worker = field(entry.elements[1], f::kWorker);
          results[i] = EvalResult{};
          results[i].error = EvalError::internal;
          results[i].message = fmt::format("eval-worker '{}' sent an unreadable result: {}", worker ? *worker : "?", e.what());
        }
        done[i] = 1;
        --remaining;
      }
    }
  }

  // Past the deadline: a timeout result each, and the still-queued requests leave the stream (a
  // worker that already holds one finishes it; its result is dropped above on a later call).
  std::vector<std::vector<std::string>> cleanup;
  std::vector<std::string> xdel = {"XDEL", config_.stream};
  for (size_t i = 0; i < n; ++i) {
    if (done[i]) continue;
    results[i] = EvalResult{};
    if (!unreadable.empty()) {
      results[i].error = EvalError::internal;
      results[i].message = fmt::format(
          "the remote evaluator's result stream '{}' at {} cannot hold results: {} (another program wrote a key of "
          "that name; it is deleted after this batch)",
          reply_key, config_.redis_url, unreadable);
    } else {
      results[i].error = EvalError::timeout;
      results[i].message = fmt::format(
          "no result from the remote evaluator within the deadline of {} s (evaluator.remote.deadline_seconds): no "
          "eval-worker on stream '{}' at {} answered in time, or none could store its result (their logs say why)",
          config_.deadline_seconds, config_.stream, config_.redis_url);
      ++timeouts_;
    }
    xdel.push_back(entry_ids[i]);
  }
  if (xdel.size() > 2) cleanup.push_back(xdel);
  cleanup.push_back({"DEL", reply_key});
  try {
    redis_->pipeline(cleanup, 10);
  } catch (const Error& e) {  // the results are complete; leftovers expire with their TTL
    fmt::print(stderr, "turnrl remote evaluator: clean-up after a batch failed: {}\n", e.what());
  }
  return results;
}

std::shared_ptr<KernelEvaluator> make_remote_evaluator(const EvaluatorConfig& config) {
  return std::make_shared<RemoteEvaluator>(config.remote);
}

}  // namespace turnrl
