// The remote evaluator against a real Redis server on loopback and real `turnrl eval-worker`
// processes evaluating real CPU candidates. Without redis-server (and no $TURNRL_TEST_REDIS_URL)
// the server tests say SKIPPED and return.
#ifdef TURNRL_WITH_REDIS
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <thread>

#include "candidates.h"
#include "redis_server.h"
#include "turnrl/kernels/backends.h"
#include "turnrl/kernels/cpu_tasks.h"
#include "turnrl/kernels/eval_codec.h"
#include "turnrl/kernels/redis_connection.h"
#include "turnrl/kernels/reference_timing_cache.h"
#include "turnrl/kernels/remote_backend.h"

using namespace turnrl;
using turnrl::test::ChildProcess;
using turnrl::test::LocalRedis;

namespace {

#define SKIP_WITHOUT_REDIS(redis)                                         \
  if (!(redis).available()) {                                             \
    WARN("SKIPPED (no Redis server): " << (redis).skip_reason());         \
    fmt::print(stderr, "SKIPPED (no Redis server): {}\n", (redis).skip_reason()); \
    return;                                                               \
  }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Polls `condition` every 20 ms for up to `seconds`.
template <typename F>
bool wait_for(F condition, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < seconds) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

// A `turnrl eval-worker --backend cpu` on `stream`, logging to the server's scratch directory;
// returns once it serves.
std::unique_ptr<ChildProcess> start_worker(LocalRedis& redis, const std::string& stream, const std::string& name,
                                           std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {test::turnrl_program(), "eval-worker", "--redis", redis.url(), "--backend", "cpu",
                                   "--workers", "1", "--stream", stream, "--name", name,
                                   "--set", "evaluator.warmup=1", "--set", "evaluator.wall_seconds=10"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto w = std::make_unique<ChildProcess>(argv, redis.scratch() + "/" + name + ".log");
  REQUIRE(w->started());
  const bool serving = wait_for([&] { return w->output().find("serving stream") != std::string::npos || !w->alive(); }, 30);
  INFO(w->output());
  REQUIRE(serving);
  REQUIRE(w->alive());
  return w;
}

RemoteEvaluatorConfig client_config(const LocalRedis& redis, const std::string& stream, double deadline) {
  RemoteEvaluatorConfig c;
  c.redis_url = redis.url();
  c.stream = stream;
  c.deadline_seconds = deadline;
  return c;
}

EvalRequest quick(const std::string& task, const std::string& kind, const std::string& dir = "") {
  EvalRequest r = test::request(task, kind, dir);
  r.correctness_trials = 1;
  r.timing_trials = 3;
  return r;
}

int64_t pending_count(RedisConnection& c, const std::string& stream) {
  const RedisReply r = c.call({"XPENDING", stream, "turnrl-eval-workers"});
  return r.elements.empty() ? 0 : r.elements[0].integer;
}

}  // namespace

TEST_CASE("remote: the codec round-trips requests and results and rejects malformed bytes by field") {
  EvalRequest q;
  q.task = "softmax_rows";
  q.candidate = std::string("int x;\0binary-safe", 18);
  q.correctness_trials = 7;
  q.timing_trials = 33;
  q.seed = 0xfedcba9876543210ull;
  const EvalRequest q2 = decode_request(encode_request(q));
  CHECK(q2.task == q.task);
  CHECK(q2.candidate == q.candidate);
  CHECK(q2.correctness_trials == 7);
  CHECK(q2.timing_trials == 33);
  CHECK(q2.seed == q.seed);

  EvalResult r;
  r.stage = EvalStage::profiled;
  r.error = EvalError::hacking;
  r.message = "trial 2: max abs error 0.5";
  r.correct = false;
  r.max_abs_error = 0.5, r.max_rel_error = 1.25, r.failing_index = 17;
  r.reference_time = {10.5, 9.25, 0.75, 20};
  r.candidate_time = {5.5, 5.0, 0.25, 20};
  r.speedup = 1.909, r.coverage = 0.75, r.reference_coverage = 0.5, r.kernel_count_coverage = 0.25;
  r.profile = {{"candidate", 110.0, 20, true}, {"lib:matmul", 30.0, 40, false}};
  r.hacking_flags = kHackLazy | kHackCallsReference;
  r.hacking_reason = "coverage 0.1";
  r.wall_seconds = 0.125;
  const std::string bytes = encode_result(r);
  const EvalResult r2 = decode_result(bytes);
  CHECK(encode_result(r2) == bytes);  // every field survives
  CHECK(r2.stage == EvalStage::profiled);
  CHECK(r2.error == EvalError::hacking);
  CHECK(r2.failing_index == 17);
  CHECK(r2.reference_time.trials == 20);
  REQUIRE(r2.profile.size() == 2);
  CHECK(r2.profile[1].name == "lib:matmul");
  CHECK(!r2.profile[1].candidate);
  CHECK(r2.hacking_flags == (kHackLazy | kHackCallsReference));

  CHECK_THROWS_WITH(decode_result("nonsense"), Catch::Contains("expected magic 'TRS1'"));
  CHECK_THROWS_WITH(decode_request(bytes), Catch::Contains("expected magic 'TRQ1'"));
  CHECK_THROWS_WITH(decode_result(bytes.substr(0, bytes.size() - 1)), Catch::Contains("field 'wall_seconds'") &&
                                                                           Catch::Contains("truncated"));
  CHECK_THROWS_WITH(decode_result(bytes + "x"), Catch::Contains("1 unexpected bytes"));
  std::string bad_stage = bytes;
  bad_stage[4] = char(200);
  CHECK_THROWS_WITH(decode_result(bad_stage), Catch::Contains("field 'stage'") && Catch::Contains("out of range"));
  std::string huge_task = encode_request(q);
  huge_task[4] = huge_task[5] = huge_task[6] = huge_task[7] = char(0xff);
  CHECK_THROWS_WITH(decode_request(huge_task), Catch::Contains("field 'task'") && Catch::Contains("exceeds the limit"));

  CHECK(parse_redis_url("redis://10.0.0.5:6390/2", "x").port == 6390);
  CHECK(parse_redis_url("redis://:secret@host", "x").password == "secret");
  CHECK_THROWS_WITH(parse_redis_url("http://h:1", "evaluator.remote.redis_url"),
                    Catch::Contains("evaluator.remote.redis_url") && Catch::Contains("redis://[:password@]host[:port][/db]"));
  CHECK_THROWS_WITH(parse_redis_url("redis://h:99999", "f"), Catch::Contains("port '99999'"));

  const auto built = built_evaluator_backends();
  CHECK(std::find(built.begin(), built.end(), "remote") != built.end());
  EvaluatorConfig unreachable;
  unreachable.backend = "remote";
  unreachable.remote.redis_url = "redis://127.0.0.1:1";
  CHECK_THROWS_WITH(make_evaluator(unreachable), Catch::Contains("evaluator.remote.redis_url") &&
                                                     Catch::Contains("cannot connect"));
}

TEST_CASE("remote: two workers, 200 candidates, one worker SIGKILLed mid-batch: every result exactly once, in order") {
  LocalRedis redis;
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("kill");
  const std::vector<std::string> vis = {"--set", "evaluator.remote.visibility_timeout_seconds=3", "--batch", "3"};
  auto doomed = start_worker(redis, stream, "doomed", vis);
  auto survivor = start_worker(redis, stream, "survivor", vis);

  // Five real candidates with distinct verdicts, and every fourth request an unknown task whose
  // name carries its position: the error message then proves the order exactly.
  const std::vector<EvalRequest> kinds = {quick("relu_bias", "honest"), quick("relu_bias", "wrong"),
                                          quick("softmax_rows", "honest"), quick("swiglu", "wrong"),
                                          quick("relu_bias", "no_compile", "broken")};
  std::vector<EvalRequest> reqs;
  for (int i = 0; i < 200; ++i) {
    EvalRequest q = kinds[size_t(i) % kinds.size()];
    if (i % 4 == 3) q.task = fmt::format("no_such_task_{}", i);
    reqs.push_back(q);
  }

  // Kill the doomed worker once a quarter of the batch is done, while it holds requests.
  RedisConnection watch(redis.url());
  int64_t held_at_kill = -1;
  std::thread killer([&] {
    wait_for([&] { return watch.command({"XLEN", stream}).integer >= 100; }, 60);  // submitted
    wait_for([&] { return watch.command({"XLEN", stream}).integer <= 150; }, 60);
    for (int tries = 0; tries < 500; ++tries) {
      const RedisReply p = watch.call({"XPENDING", stream, "turnrl-eval-workers", "-", "+", "100", "doomed"});
      if (!p.elements.empty()) {
        doomed->stop(SIGKILL);
        held_at_kill = int64_t(watch.call({"XPENDING", stream, "turnrl-eval-workers", "-", "+", "100", "doomed"})
                                   .elements.size());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  RemoteEvaluator client(client_config(redis, stream, 120));
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<EvalResult> res = client.evaluate(reqs);
  const double seconds = seconds_since(t0);
  killer.join();
  fmt::print(stderr, "remote kill test: 200 results in {:.1f} s; {} requests held by the killed worker; {} duplicates dropped\n",
             seconds, held_at_kill, client.duplicates_dropped());

  INFO("survivor log:\n" << survivor->output() << "\ndoomed log:\n" << doomed->output());
  CHECK(held_at_kill >= 1);  // it died holding work: only a reclaim can complete the batch
  CHECK(survivor->output().find("claimed") != std::string::npos);
  REQUIRE(res.size() == 200);
  CHECK(client.timeouts() == 0);
  for (size_t i = 0; i < res.size(); ++i) {
    const EvalResult& r = res[i];
    INFO("request " << i << ": " << reqs[i].task << " -> " << to_string(r.error) << ": " << r.message);
    if (i % 4 == 3) {
      CHECK(r.error == EvalError::internal);
      CHECK(r.message == fmt::format("unknown cpu task 'no_such_task_{}'", i));
      continue;
    }
    switch (i % kinds.size()) {
      case 0: case 2: CHECK(r.correct); CHECK(r.candidate_time.trials == 3); break;
      case 1: case 3: CHECK(r.error == EvalError::mismatch); break;
      case 4: CHECK(r.error == EvalError::compile); break;
    }
  }
  // Nothing left behind: no request queued or pending (a worker acknowledges right after storing
  // the result, which the client may read first), the client's result stream deleted.
  CHECK(wait_for([&] { return watch.command({"XLEN", stream}).integer == 0 && pending_count(watch, stream) == 0; }, 10));
  CHECK(watch.command({"EXISTS", stream + ":results:" + client.client_id()}).integer == 0);
  CHECK(survivor->stop(SIGTERM) == 0);  // a clean exit on SIGTERM
}

TEST_CASE("remote: a request past its deadline comes back as a timeout result, never a hang") {
  LocalRedis redis;
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("deadline");
  RemoteEvaluator client(client_config(redis, stream, 1.0));  // no worker serves this stream
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = client.evaluate({quick("relu_bias", "honest"), quick("swiglu", "honest"), quick("gelu_tanh", "wrong")});
  const double seconds = seconds_since(t0);
  CHECK(seconds >= 1.0);
  CHECK(seconds < 3.0);
  REQUIRE(res.size() == 3);
  for (const auto& r : res) {
    CHECK(r.error == EvalError::timeout);
    CHECK(!r.correct);
    CHECK_THAT(r.message, Catch::Contains("deadline of 1 s") && Catch::Contains("evaluator.remote.deadline_seconds"));
  }
  CHECK(client.timeouts() == 3);
  RedisConnection c(redis.url());
  CHECK(c.command({"XLEN", stream}).integer == 0);  // the unanswered requests left the stream

  // A worker that starts later never evaluates a request already past its deadline.
  c.command({"XADD", stream, "*", "id", "late", "reply", stream + ":results:probe", "deadline", "1000",
             "request", encode_request(quick("relu_bias", "honest"))});
  auto worker = start_worker(redis, stream, "late-worker");
  CHECK(wait_for([&] { return worker->output().find("skipped 1 requests past their deadline") != std::string::npos; }, 20));
  CHECK(c.command({"EXISTS", stream + ":results:probe"}).integer == 0);
  CHECK(wait_for([&] { return c.command({"XLEN", stream}).integer == 0; }, 10));
}

TEST_CASE("remote: a malformed message is rejected and logged, and the worker keeps serving") {
  LocalRedis redis;
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("malformed");
  auto worker = start_worker(redis, stream, "sturdy");
  RedisConnection c(redis.url());
  const std::string reply = stream + ":results:probe";
  const std::string good = encode_request(quick("relu_bias", "honest"));
  c.command({"XADD", stream, "*", "garbage", "x"});                                                   // no id: dropped
  c.command({"XADD", stream, "*", "id", "bad-body", "reply", reply, "deadline", "4e9", "request", "not a request"});
  c.command({"XADD", stream, "*", "id", "bad-mode", "reply", reply, "deadline", "4e9", "reference", "sometimes",
             "request", good});
  c.command({"XADD", stream, "*", "id", "bad-reply", "reply", "someone:else", "deadline", "4e9", "request", good});
  RemoteEvaluator client(client_config(redis, stream, 60));
  const auto res = client.evaluate({quick("relu_bias", "honest")});
  REQUIRE(res.size() == 1);
  CHECK(res[0].correct);
  CHECK(worker->alive());

  const std::string log = worker->output();
  INFO(log);
  size_t rejected = 0;
  for (size_t p = log.find("rejected malformed entry"); p != std::string::npos; p = log.find("rejected malformed entry", p + 1))
    ++rejected;
  CHECK(rejected == 4);
  CHECK_THAT(log, Catch::Contains("eval codec: malformed request") && Catch::Contains("no usable id: dropped") &&
                      Catch::Contains("allowed: interleaved, cached"));
  // The answerable ones got an internal-error result naming the problem.
  const RedisReply answers = c.command({"XRANGE", reply, "-", "+"});
  REQUIRE(answers.elements.size() == 2);
  std::map<std::string, EvalResult> by_id;
  for (const auto& e : answers.elements) {
    const auto& fv = e.elements[1].elements;
    by_id[fv[1].str] = decode_result(fv[3].str);
  }
  CHECK(by_id.at("bad-body").error == EvalError::internal);
  CHECK_THAT(by_id.at("bad-body").message, Catch::Contains("field 'task'") || Catch::Contains("magic"));
  CHECK(by_id.at("bad-mode").error == EvalError::internal);
  // Every entry acknowledged and removed (right after its result is stored, which the client may read first).
  CHECK(wait_for([&] { return c.command({"XLEN", stream}).integer == 0 && pending_count(c, stream) == 0; }, 10));
}

TEST_CASE("remote: stored results expire after evaluator.remote.result_ttl_seconds") {
  LocalRedis redis;
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("ttl");
  auto worker = start_worker(redis, stream, "ttl-worker", {"--set", "evaluator.remote.result_ttl_seconds=1"});
  RedisConnection c(redis.url());
  const std::string reply = stream + ":results:gone-client";  // a client that never collects
  c.command({"XADD", stream, "*", "id", "orphan", "reply", reply, "deadline", "4e9", "request",
             encode_request(quick("relu_bias", "wrong"))});
  REQUIRE(wait_for([&] { return c.command({"EXISTS", reply}).integer == 1; }, 30));
  const int64_t ttl_ms = c.command({"PTTL", reply}).integer;
  CHECK(ttl_ms > 0);
  CHECK(ttl_ms <= 1000);
  CHECK(c.command({"XLEN", reply}).integer == 1);
  CHECK(wait_for([&] { return c.command({"EXISTS", reply}).integer == 0; }, 3));
}

TEST_CASE("remote: cached reference timing is measured once per (task, device kind) and keyed on the task's definition") {
  // The key changes when the task does (and with the timing settings), never otherwise.
  CpuEvalOptions o;
  o.warmup = 1;
  const std::string fp = cpu_task_fingerprint("softmax_rows", o);
  CHECK(cpu_task_fingerprint("softmax_rows", o) == fp);
  CHECK(cpu_task_fingerprint("relu_bias", o) != fp);
  CpuEvalOptions o2 = o;
  o2.warmup = 2;
  CHECK(cpu_task_fingerprint("softmax_rows", o2) != fp);
  const CpuTask original = cpu_task("softmax_rows");
  CpuTask changed = original;
  changed.shape_sets[0][0][1] += 1;
  register_cpu_task(changed);
  CHECK(cpu_task_fingerprint("softmax_rows", o) != fp);
  register_cpu_task(original);
  CHECK(cpu_task_fingerprint("softmax_rows", o) == fp);
  CHECK(cpu_device_kind().rfind("cpu:", 0) == 0);

  LocalRedis redis;
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("reference");
  auto worker = start_worker(redis, stream, "ref-worker");
  RemoteEvaluatorConfig cfg = client_config(redis, stream, 60);
  cfg.cached_reference_timing = true;
  RemoteEvaluator client(cfg);
  std::vector<EvalRequest> reqs = {quick("softmax_rows", "honest"), quick("softmax_rows", "honest"),
                                   quick("relu_bias", "honest"), quick("softmax_rows", "wrong")};
  for (auto& q : reqs) q.timing_trials = 5;
  auto res = client.evaluate(reqs);
  auto again = client.evaluate(reqs);
  res.insert(res.end(), again.begin(), again.end());

  RedisConnection c(redis.url());
  ReferenceTimingCache cache(&c, stream, 60);
  const auto softmax = cache.find({"softmax_rows", fp, cpu_device_kind()});
  const auto relu = cache.find({"relu_bias", cpu_task_fingerprint("relu_bias", o), cpu_device_kind()});
  REQUIRE(softmax);
  REQUIRE(relu);
  CHECK(softmax->trials == 5);
  CHECK(c.command({"PTTL", cache.redis_key({"softmax_rows", fp, cpu_device_kind()})}).integer > 0);
  for (size_t i = 0; i < res.size(); ++i) {
    const EvalResult& r = res[i];
    const EvalRequest& q = reqs[i % reqs.size()];
    INFO("result " << i << " " << q.task << ": " << to_string(r.error) << " " << r.message);
    if (i % reqs.size() == 3) {  // wrong: never timed
      CHECK(r.error == EvalError::mismatch);
      continue;
    }
    REQUIRE(r.correct);
    const TimingStats& ref = q.task == "softmax_rows" ? *softmax : *relu;
    CHECK(r.reference_time.median_us == ref.median_us);  // every result reports the one measurement
    CHECK(r.reference_time.trials == ref.trials);
    CHECK(r.candidate_time.trials == 5);
    CHECK(r.speedup == Approx(ref.median_us / r.candidate_time.median_us));
  }
  CHECK(worker->stop(SIGTERM) == 0);
  // Two lookups missed (the first softmax_rows and relu_bias); the other six were served by them.
  CHECK_THAT(worker->output(), Catch::Contains("reference cache 6 hits, 2 misses"));
}
#endif  // TURNRL_WITH_REDIS

TEST_CASE("remote: a request that took its workers down max_deliveries times is answered as a crash, not evaluated again") {
  LocalRedis redis;
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("poison");
  const std::string group = "turnrl-eval-workers";
  RedisConnection c(redis.url());
  c.command({"XGROUP", "CREATE", stream, group, "0", "MKSTREAM"});
  RemoteEvaluatorConfig cc = client_config(redis, stream, 60);
  RemoteEvaluator client(cc);
  std::vector<EvalResult> res;
  std::thread submit([&] { res = client.evaluate({quick("relu_bias", "honest"), quick("relu_bias", "honest")}); });
  REQUIRE(wait_for([&] { return c.command({"XLEN", stream}).integer == 2; }, 20));
  // Workers that died holding them: both taken, and the first one's delivery count raised to 3
  // (three workers died on it); the second was delivered once (one death, e.g. a machine lost).
  const RedisReply taken = c.command({"XREADGROUP", "GROUP", group, "dead-worker", "COUNT", "10", "STREAMS", stream, ">"});
  REQUIRE(taken.elements.at(0).elements.at(1).elements.size() == 2);
  const std::string poison = taken.elements[0].elements[1].elements[0].elements[0].str;
  c.command({"XCLAIM", stream, group, "dead-worker", "0", poison, "RETRYCOUNT", "3", "JUSTID"});
  auto worker = start_worker(redis, stream, "survivor", {"--set", "evaluator.remote.visibility_timeout_seconds=0.3"});
  const auto t0 = std::chrono::steady_clock::now();
  submit.join();
  fmt::print(stderr, "remote poison test: both answered {:.1f} s after the worker started\n", seconds_since(t0));
  INFO(worker->output());
  REQUIRE(res.size() == 2);
  CHECK(res[0].error == EvalError::crash);
  CHECK_THAT(res[0].message, Catch::Contains("delivered 4 times") && Catch::Contains("evaluator.remote.max_deliveries: 3"));
  CHECK(res[1].correct);  // a request reclaimed once is evaluated as usual
  CHECK_THAT(worker->output(), Catch::Contains("answered as a crash"));
  CHECK(wait_for([&] { return c.command({"XLEN", stream}).integer == 0 && pending_count(c, stream) == 0; }, 10));
}

TEST_CASE("remote: after FLUSHALL and after a Redis restart without persistence the workers recreate their group and serve") {
  LocalRedis redis(/*allow_external=*/false);  // flushed and restarted: never a shared server
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("nogroup");
  auto worker = start_worker(redis, stream, "phoenix", {"--set", "evaluator.remote.visibility_timeout_seconds=1"});
  const std::vector<EvalRequest> three = {quick("relu_bias", "honest"), quick("relu_bias", "wrong"),
                                          quick("softmax_rows", "honest")};
  RemoteEvaluator client(client_config(redis, stream, 60));  // one client throughout, as a trainer has
  auto served = [&](const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = client.evaluate(three);
    int answered = 0;
    for (const auto& r : res) answered += r.error != EvalError::timeout;
    fmt::print(stderr, "remote NOGROUP test, {}: {} of 3 requests served in {:.1f} s\n", what, answered, seconds_since(t0));
    REQUIRE(res.size() == 3);
    CHECK(res[0].correct);
    CHECK(res[1].error == EvalError::mismatch);
    CHECK(res[2].correct);
  };
  served("before");
  {
    RedisConnection c(redis.url());
    c.command({"FLUSHALL"});
  }
  served("after FLUSHALL");
  REQUIRE(redis.restart());
  served("after a restart");
  INFO(worker->output());
  CHECK(worker->alive());
  size_t recreated = 0;
  const std::string log = worker->output();
  for (size_t p = log.find("creating it again"); p != std::string::npos; p = log.find("creating it again", p + 1)) ++recreated;
  CHECK(recreated >= 2);
}

TEST_CASE("remote: a result Redis refuses to store (maxmemory) is not acknowledged, and is stored once Redis accepts it") {
  LocalRedis redis(/*allow_external=*/false);  // reconfigured: never a shared server
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("oom");
  auto worker = start_worker(redis, stream, "frugal");
  RedisConnection c(redis.url());
  REQUIRE(::kill(worker->pid(), SIGSTOP) == 0);  // hold it until the requests are queued and memory is full
  RemoteEvaluator client(client_config(redis, stream, 60));
  std::vector<EvalResult> res;
  std::thread submit([&] { res = client.evaluate({quick("relu_bias", "honest"), quick("relu_bias", "wrong")}); });
  REQUIRE(wait_for([&] { return c.command({"XLEN", stream}).integer == 2; }, 20));
  c.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  c.command({"CONFIG", "SET", "maxmemory", "1"});  // every write that needs memory is refused (OOM)
  REQUIRE(::kill(worker->pid(), SIGCONT) == 0);
  const bool refused = wait_for([&] { return worker->output().find("Redis refused the result") != std::string::npos; }, 60);
  INFO(worker->output());
  CHECK(refused);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(c.command({"XLEN", stream}).integer == 2);  // neither deleted...
  CHECK(pending_count(c, stream) == 2);              // ...nor acknowledged
  auto refusals = [&] {
    const std::string log = worker->output();
    size_t n = 0;
    for (size_t p = log.find("Redis refused the result"); p != std::string::npos; p = log.find("Redis refused the result", p + 1)) ++n;
    return n;
  };
  CHECK(wait_for([&] { return refusals() >= 2; }, 30));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // a few retries of the writes
  CHECK(refusals() == 2);  // each refusal logged once, however often the write is retried
  c.command({"CONFIG", "SET", "maxmemory", "0"});
  const auto t0 = std::chrono::steady_clock::now();
  submit.join();
  fmt::print(stderr, "remote maxmemory test: 2 of 2 results delivered {:.1f} s after memory was freed\n", seconds_since(t0));
  REQUIRE(res.size() == 2);
  CHECK(res[0].correct);
  CHECK(res[1].error == EvalError::mismatch);
  CHECK(wait_for([&] { return c.command({"XLEN", stream}).integer == 0 && pending_count(c, stream) == 0; }, 10));
}

TEST_CASE("remote: a reply key of another type is a clear error at once, and the next batch is served") {
  LocalRedis redis;
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("wrongtype");
  auto worker = start_worker(redis, stream, "typed");
  RedisConnection c(redis.url());
  RemoteEvaluator client(client_config(redis, stream, 60));
  c.command({"SET", stream + ":results:" + client.client_id(), "someone else's string"});
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = client.evaluate({quick("relu_bias", "honest")});
  CHECK(seconds_since(t0) < 10);
  REQUIRE(res.size() == 1);
  CHECK(res[0].error == EvalError::internal);
  CHECK_THAT(res[0].message, Catch::Contains("cannot hold results") && Catch::Contains("WRONGTYPE"));
  // The stray key is gone with the batch; the worker's retried write lands and acknowledges the request.
  INFO(worker->output());
  CHECK(wait_for([&] { return c.command({"XLEN", stream}).integer == 0 && pending_count(c, stream) == 0; }, 20));
  const auto next = client.evaluate({quick("relu_bias", "honest")});
  CHECK(next.at(0).correct);
}

TEST_CASE("remote: request fields outside the worker's limits are answered with an error naming the field and the limit") {
  LocalRedis redis;
  SKIP_WITHOUT_REDIS(redis);
  const std::string stream = redis.stream("limits");
  auto worker = start_worker(redis, stream, "bounded");
  RemoteEvaluator client(client_config(redis, stream, 60));
  std::vector<EvalRequest> reqs(7, quick("relu_bias", "honest"));
  reqs[0].correctness_trials = 100000;
  reqs[1].timing_trials = 2000000000;
  reqs[2].correctness_trials = -1;
  reqs[3].timing_trials = 0;
  reqs[4].candidate = std::string(5 << 20, ' ');
  reqs[5].task = std::string(300, 't');
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = client.evaluate(reqs);
  fmt::print(stderr, "remote limits test: 7 answers in {:.1f} s\n", seconds_since(t0));
  REQUIRE(res.size() == 7);
  const std::vector<std::string> expected = {"field 'correctness_trials' is 100000; allowed: [1, 1000]",
                                             "field 'timing_trials' is 2000000000; allowed: [1, 10000]",
                                             "field 'correctness_trials' is -1; allowed: [1, 1000]",
                                             "field 'timing_trials' is 0; allowed: [1, 10000]",
                                             "field 'candidate' is 5242880 bytes; allowed: at most 4194304",
                                             "field 'task' is 300 bytes; allowed: 1 to 256"};
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(res[i].error == EvalError::internal);
    CHECK_THAT(res[i].message, Catch::Contains(expected[i]));
  }
  CHECK(res[6].correct);
  CHECK(worker->alive());
}
