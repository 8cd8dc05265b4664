// Remote evaluator throughput: one batch of CPU candidates (honest, wrong, lazy and hacking ones
// over the built-in tasks) through the remote backend with 1, 2 and 4 `turnrl eval-worker`
// processes on this machine (one sandboxed worker each), served by a private redis-server on
// loopback. Baseline, measured in the same run on the same batch: the in-process CpuEvaluator pool
// (one sandboxed worker per core). Also: 2 workers with cached reference timing. The compile
// cache is warmed first, so every row measures evaluation, queueing and transport only.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench_util.h"
#ifdef TURNRL_WITH_REDIS
#include "kernels/redis_server.h"
#include "turnrl/kernels/cpu_backend.h"
#include "turnrl/kernels/cpu_tasks.h"
#include "turnrl/kernels/remote_backend.h"
#endif

#ifndef TURNRL_WITH_REDIS
int main() {
  std::printf("remote_bench: this turnrl was built without hiredis: the remote evaluator is not available\n");
  return 0;
}
#else
using namespace turnrl;

namespace {

std::string candidates_dir() {
  namespace fs = std::filesystem;
  if (const char* s = std::getenv("TURNRL_SOURCE_DIR")) return std::string(s) + "/tests/data/cpu_tasks/";
  return std::string(TURNRL_SOURCE_DIR) + "/tests/data/cpu_tasks/";
}

std::vector<EvalRequest> batch(size_t n) {
  std::vector<EvalRequest> all;
  for (const auto& task : cpu_task_names())
    for (const auto& entry : std::filesystem::directory_iterator(candidates_dir() + task)) {
      EvalRequest r;
      r.task = task;
      r.candidate = test::read_text(entry.path().string());
      r.correctness_trials = 5;
      r.timing_trials = 20;
      all.push_back(r);
    }
  std::vector<EvalRequest> out;
  for (size_t i = 0; i < n; ++i) out.push_back(all[(i * 7) % all.size()]);  // tasks interleaved
  return out;
}

struct Row {
  std::string name;
  int sandboxes = 0;
  double evals_per_s = 0;
  int correct = 0;
};

Row measure(const std::string& name, int sandboxes, KernelEvaluator& e, const std::vector<EvalRequest>& reqs) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = e.evaluate(reqs);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Row r{name, sandboxes, double(reqs.size()) / wall, 0};
  for (const auto& x : res) r.correct += x.correct;
  return r;
}

// N eval-workers on a fresh stream; each is warmed (sandbox started) before the measurement.
Row measure_remote(test::LocalRedis& redis, int workers, bool cached_reference, const std::string& cache,
                   const std::vector<EvalRequest>& reqs) {
  const std::string stream = redis.stream("bench");
  std::vector<std::unique_ptr<test::ChildProcess>> procs;
  for (int w = 0; w < workers; ++w) {
    const std::string name = fmt::format("bench-{}", w);
    procs.push_back(std::make_unique<test::ChildProcess>(
        std::vector<std::string>{test::turnrl_program(), "eval-worker", "--redis", redis.url(), "--backend", "cpu",
                                 "--workers", "1", "--stream", stream, "--name", name, "--set",
                                 "evaluator.cache_dir=" + cache},
        redis.scratch() + "/" + name + ".log"));
  }
  for (auto& p : procs)
    for (int i = 0; i < 3000 && p->alive() && p->output().find("serving stream") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  RemoteEvaluatorConfig c;
  c.redis_url = redis.url();
  c.stream = stream;
  c.cached_reference_timing = cached_reference;
  RemoteEvaluator client(c);
  // Warm-up: every worker starts its sandbox (and, cached, the reference timings get measured).
  client.evaluate(std::vector<EvalRequest>(reqs.begin(), reqs.begin() + std::min<size_t>(reqs.size(), 4 * workers + 8)));
  const std::string label = fmt::format("remote, {} eval-worker{}{}", workers, workers > 1 ? "s" : "",
                                        cached_reference ? ", cached reference" : "");
  Row r = measure(label, workers, client, reqs);
  if (client.timeouts() > 0) std::fprintf(stderr, "remote_bench: %lld timeouts\n", (long long)client.timeouts());
  for (auto& p : procs) p->stop(SIGTERM);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const auto args = bench::parse_args(argc, argv);
  const size_t n = args.quick ? 24 : 96;
  const auto reqs = batch(n);
  test::LocalRedis redis(false);
  if (!redis.available()) {
    std::printf("remote_bench: skipped: %s\n", redis.skip_reason().c_str());
    return 0;
  }
  const std::string cache = make_private_dir("turnrl-remote-bench-cache");

  CpuEvalOptions pooled;
  pooled.cache_dir = cache;
  CpuEvaluator pool(pooled);
  std::fprintf(stderr, "remote_bench: compiling %zu candidates (warm-up of the compile cache and the pool)...\n", n);
  pool.evaluate(reqs);
  std::vector<Row> rows;
  std::fprintf(stderr, "remote_bench: in-process pool (%d sandboxes)...\n", pool.pool_size());
  rows.push_back(measure(fmt::format("baseline: in-process pool"), pool.pool_size(), pool, reqs));
  for (int workers : {1, 2, 4}) {
    std::fprintf(stderr, "remote_bench: remote, %d eval-workers...\n", workers);
    rows.push_back(measure_remote(redis, workers, false, cache, reqs));
  }
  std::fprintf(stderr, "remote_bench: remote, 2 eval-workers, cached reference timing...\n");
  rows.push_back(measure_remote(redis, 2, true, cache, reqs));
  // Transport alone: requests for an unknown task are answered without any evaluation work, so
  // this is the queue's own cost per request (submit, read, store, acknowledge, collect).
  std::vector<EvalRequest> empty_work(args.quick ? 500 : 2000);
  for (auto& q : empty_work) q.task = "no_such_task", q.candidate = "int x;";
  std::fprintf(stderr, "remote_bench: transport only, %zu requests...\n", empty_work.size());
  std::vector<Row> transport;
  transport.push_back(measure("baseline: in-process pool", pool.pool_size(), pool, empty_work));
  for (int workers : {1, 2}) transport.push_back(measure_remote(redis, workers, false, cache, empty_work));
  remove_private_dir(cache);

  std::printf("remote_bench: %zu CPU candidates (5 correctness, 20 timing trials), %u cores, redis-server on loopback\n",
              n, std::thread::hardware_concurrency());
  std::printf("%-44s %10s %10s %9s %12s\n", "configuration", "sandboxes", "evals/s", "correct", "vs baseline");
  for (const auto& r : rows)
    std::printf("%-44s %10d %10.2f %9d %11.2fx\n", r.name.c_str(), r.sandboxes, r.evals_per_s, r.correct,
                r.evals_per_s / rows[0].evals_per_s);
  std::printf("\ntransport only: %zu requests answered without evaluation (unknown task)\n", empty_work.size());
  std::printf("%-44s %10s %10s %12s\n", "configuration", "sandboxes", "requests/s", "us/request");
  for (const auto& r : transport)
    std::printf("%-44s %10d %10.0f %12.1f\n", r.name.c_str(), r.sandboxes, r.evals_per_s, 1e6 / r.evals_per_s);
  return 0;
}
#endif
