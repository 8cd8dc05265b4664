// `turnrl eval-worker`: one worker of the remote evaluator (eval/remote_backend.h). It runs a
// local evaluator pool (cpu, cuda or python backend) and serves a Redis stream through a consumer
// group until SIGTERM or SIGINT; the batch in hand is finished and acknowledged first.
#include <atomic>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/backends.h"
#include "turnrl/kernels/config.h"
#ifdef TURNRL_WITH_REDIS
#include "turnrl/kernels/remote_backend.h"
#endif

namespace turnrl::cli {
namespace {

// Each option overrides the config's value only when given (CLI::Option::count() > 0).
struct EvalWorkerArgs {
  std::string config, redis, backend, stream, group, name;
  std::vector<std::string> sets;
  int workers = 0, batch = 1;
  CLI::Option *redis_opt = nullptr, *backend_opt = nullptr, *stream_opt = nullptr, *group_opt = nullptr,
              *name_opt = nullptr, *workers_opt = nullptr, *batch_opt = nullptr;
};

#ifdef TURNRL_WITH_REDIS
std::atomic<bool> g_stop{false};
void request_stop(int) { g_stop.store(true); }
#endif

void run_eval_worker(const EvalWorkerArgs& a) {
#ifndef TURNRL_WITH_REDIS
  (void)a;
  fail("eval-worker: this turnrl was built without hiredis (apt install libhiredis-dev, then reconfigure): the "
       "remote evaluator is not available");
#else
  EvaluatorConfig config = load_config(a.config, a.sets).evaluator;
  if (a.redis_opt->count()) config.remote.redis_url = a.redis;
  if (a.stream_opt->count()) config.remote.stream = a.stream;
  config.backend = a.backend_opt->count() ? a.backend : builtin_task_backend(config);
  if (config.backend != "cpu" && config.backend != "cuda" && config.backend != "python")
    fail("eval-worker --backend: '{}' is not a local backend; allowed: cpu, cuda, python", config.backend);
  if (a.workers_opt->count()) config.workers = a.workers;
  RemoteWorkerOptions w;
  if (a.group_opt->count()) w.group = a.group;
  if (a.name_opt->count()) w.name = a.name;
  if (a.batch_opt->count()) w.batch = a.batch;

  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  RemoteWorker worker(config, w);
  worker.serve(g_stop);
#endif
}

}  // namespace

void add_eval_worker_command(CLI::App& app) {
  auto a = std::make_shared<EvalWorkerArgs>();
  CLI::App* c = app.add_subcommand(
      "eval-worker", "Serve the remote evaluator's Redis stream with a local evaluator pool until SIGTERM/SIGINT");
  c->add_option("--config", a->config,
                "YAML config supplying the evaluator section (backend settings, evaluator.remote.*)")->transform(shipped_config());
  add_config_overrides(*c, a->sets);
  a->redis_opt = c->add_option("--redis", a->redis, "redis://[:password@]host[:port][/db] (default: evaluator.remote.redis_url)");
  a->backend_opt = c->add_option("--backend", a->backend, "The local backend (default: evaluator.backend, or evaluator.remote.worker_backend when that is remote)")
                       ->check(CLI::IsMember({"cpu", "cuda", "python"}));
  a->workers_opt = c->add_option("--workers", a->workers,
                                 "Local worker processes; 0 = one per core or GPU (default: evaluator.workers)")
                       ->check(integer_in(0, 4096));
  a->stream_opt = c->add_option("--stream", a->stream, "Request stream (default: evaluator.remote.stream)");
  a->group_opt = c->add_option("--group", a->group, "Consumer group shared by the workers (default: turnrl-eval-workers)");
  a->name_opt = c->add_option("--name", a->name, "This worker's consumer name, unique (default: <hostname>-<pid>)");
  a->batch_opt = c->add_option("--batch", a->batch, "Requests read and evaluated at once (default: the pool size)")
                     ->check(integer_in(1, 1 << 16));
  c->footer(
      "The trainer side sets evaluator.backend: remote (docs/evaluator.md).\n\n"
      "Example:\n"
      "  turnrl eval-worker --redis redis://10.0.0.1:6379 --backend cpu --workers 8");
  c->callback([a] { run_eval_worker(*a); });
}

}  // namespace turnrl::cli
