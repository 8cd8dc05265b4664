// `turnrl eval-worker`: one worker of the remote evaluator (eval/remote_backend.h). It runs a
// local evaluator pool (cpu, cuda or python backend) and serves a Redis stream through a consumer
// group until SIGTERM or SIGINT; the batch in hand is finished and acknowledged first.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/error.h"
#include "turnrl/trainer/config.h"
#ifdef TURNRL_WITH_REDIS
#include "turnrl/eval/remote_backend.h"
#endif

namespace {

constexpr const char* kWorkerUsage = R"(usage:
  turnrl eval-worker --redis URL --backend cpu|cuda|python [--workers N] [--stream S] [--group G]
                     [--name NAME] [--batch N] [--config CONFIG] [--set key.path=value ...]

Serves the remote evaluator's request stream (evaluator.remote, docs/evaluator.md) with a local
evaluator pool until SIGTERM/SIGINT. CONFIG supplies the evaluator section (backend settings,
evaluator.remote.visibility_timeout_seconds, result_ttl_seconds); the options override it.
  --redis URL     redis://[:password@]host[:port][/db]   (default: evaluator.remote.redis_url)
  --backend B     the local backend                        (default: evaluator.backend)
  --workers N     local worker processes; 0 = one per core or GPU (default: evaluator.workers)
  --stream S      request stream                           (default: evaluator.remote.stream)
  --group G       consumer group shared by the workers     (default: turnrl-eval-workers)
  --name NAME     this worker's consumer name, unique      (default: <hostname>-<pid>)
  --batch N       requests read and evaluated at once      (default: the pool size)
)";

#ifdef TURNRL_WITH_REDIS
std::atomic<bool> g_stop{false};
void request_stop(int) { g_stop.store(true); }

int to_int(const std::string& option, const std::string& value, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < lo || v > hi)
    turnrl::fail("eval-worker {}: '{}' is not an integer in [{}, {}]", option, value, lo, hi);
  return int(v);
}
#endif

}  // namespace

int eval_worker_command(int argc, char** argv) {
#ifndef TURNRL_WITH_REDIS
  (void)argc, (void)argv;
  fmt::print(stderr, "turnrl eval-worker: this turnrl was built without hiredis (apt install libhiredis-dev, then "
                     "reconfigure): the remote evaluator is not available\n");
  return 2;
#else
  using namespace turnrl;
  static const std::vector<std::string> valued = {"--redis", "--backend", "--workers", "--stream", "--group",
                                                  "--name",  "--batch",   "--config",  "--set"};
  std::map<std::string, std::string> opt;
  std::vector<std::string> sets;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      fmt::print("{}", kWorkerUsage);
      return 0;
    }
    if (std::find(valued.begin(), valued.end(), arg) == valued.end())
      fail("eval-worker: unknown argument '{}'\n{}", arg, kWorkerUsage);
    if (i + 1 >= argc) fail("eval-worker: {} needs a value\n{}", arg, kWorkerUsage);
    if (arg == "--set") sets.push_back(argv[++i]);
    else opt[arg] = argv[++i];
  }
  EvaluatorConfig config = load_config(opt.count("--config") ? opt.at("--config") : "", sets).evaluator;
  if (opt.count("--redis")) config.remote.redis_url = opt.at("--redis");
  if (opt.count("--stream")) config.remote.stream = opt.at("--stream");
  if (opt.count("--backend")) config.backend = opt.at("--backend");
  if (config.backend != "cpu" && config.backend != "cuda" && config.backend != "python")
    fail("eval-worker --backend: '{}' is not a local backend; allowed: cpu, cuda, python", config.backend);
  if (opt.count("--workers")) config.workers = to_int("--workers", opt.at("--workers"), 0, 4096);
  RemoteWorkerOptions w;
  if (opt.count("--group")) w.group = opt.at("--group");
  if (opt.count("--name")) w.name = opt.at("--name");
  if (opt.count("--batch")) w.batch = to_int("--batch", opt.at("--batch"), 1, 1 << 16);

  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  RemoteWorker worker(config, w);
  worker.serve(g_stop);
  return 0;
#endif
}
