#include "turnrl/kernels/backends.h"

#include <fmt/format.h>

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/cpu_backend.h"
#include "turnrl/kernels/cuda_backend.h"
#include "turnrl/kernels/python_backend.h"
#ifdef TURNRL_WITH_REDIS
#include "turnrl/kernels/remote_backend.h"
#endif

namespace turnrl {

std::vector<std::string> built_evaluator_backends() {
  std::vector<std::string> names = {"cpu"};
#ifdef TURNRL_WITH_CUDA
  names.push_back("cuda");
#endif
  names.push_back("python");
#ifdef TURNRL_WITH_REDIS
  names.push_back("remote");
#endif
  return names;
}

std::string builtin_task_backend(const EvaluatorConfig& config) {
  return config.backend == "remote" ? config.remote.worker_backend : config.backend;
}

template <typename V>
static void describe(V& v, EvaluatorConfig& o) {
  v.choice("backend", o.backend, {"cpu", "cuda", "python", "remote"},
           fmt::format("cpu | cuda | python | remote (built here: {})", fmt::join(built_evaluator_backends(), ", ")));
  v.integer("workers", o.workers, 0, 4096,
            "worker processes; 0 = one per core (cpu, python on cpu), 4 per GPU (cuda) or python.workers_per_device");
  v.text("cache_dir", o.cache_dir, "compiled-candidate cache; \"\" = default");
  v.number("compile_seconds", o.compile_seconds, 0.1, 1e5, "compiler time limit");
  v.integer("warmup", o.warmup, 0, 1000, "untimed runs before timing");
  v.number("wall_seconds", o.wall_seconds, 0.1, 1e5, "per worker call, then the worker is killed");
  v.choice("sandbox", o.sandbox, {"namespaces", "rlimits-only"},
           "namespaces | rlimits-only (weaker: no file-system isolation; docs/evaluator.md)");
  v.section("cuda", "backend cuda: NVRTC + CUDA events + CUPTI", [&](auto& c) {
    c.integers("devices", o.cuda.devices, 0, 1023, "GPU ordinals, one worker each; [] = every visible GPU");
    c.number("l2_flush_mib", o.cuda.l2_flush_mib, 0, 1 << 20, "L2 flush buffer; 0 = twice the L2 size");
  });
  v.section("python", "backend python: KernelBench-format tasks, persistent Python workers", [&](auto& p) {
    p.text("executable", o.python.executable, "interpreter with torch; \"\" = $TURNRL_PYTHON, else python3 on PATH");
    p.choice("device", o.python.device, {"cpu", "cuda", "auto"}, "cpu | cuda | auto");
    p.text("tasks_file", o.python.tasks_file, "JSON Lines task file");
    p.number("startup_seconds", o.python.startup_seconds, 1, 1e5, "start-up limit of a fresh worker");
    p.integer("workers_per_device", o.python.workers_per_device, 0, 4096,
              "0 = 4 per GPU (cuda), one per core (cpu); evaluator.workers > 0 sets the total instead");
    p.choice("exclusive_measurement", o.python.exclusive_measurement, {"auto", "on", "off"},
             "timing and profiling hold a per-device lock: on | off | auto (on for cuda, off for cpu)");
    p.flag("spare_worker", o.python.spare_worker, "a worker per device started ahead, so replacing one costs no start");
    p.flag("reuse_reference_timing", o.python.reuse_reference_timing,
           "reference timed once per (task text, device, timing plan); false = in every evaluation");
    p.section("scaling", "large problems (docs/evaluator.md, \"Large problems\")", [&](auto& s) {
      ProblemScaling& k = o.python.scaling;
      constexpr double mib = double(1 << 20);
      double ship_mib = double(k.ship_bytes) / mib, large_mib = double(k.large_bytes) / mib;
      s.number("ship_mib", ship_mib, 0, 1 << 30, "outputs up to this size are compared whole in the trainer; larger "
               "ones on the worker's device plus spot_checks places here");
      s.integer("spot_checks", k.spot_checks, 1, 1 << 30, "elements per large output compared here, drawn after the call");
      s.number("large_mib", large_mib, 0, 1 << 30, "a trial of more inputs and outputs than this is large: no extra "
               "shape sets, fewer kept trials, one timed call checked");
      s.number("hold_fraction", k.hold_fraction, 1e-6, 1, "large problems: kept trials use at most this share of the "
               "memory left; (0, 1]");
      s.number("timing_budget_seconds", k.timing_budget_seconds, 1e-6, 1e5, "timed calls per side: as many as fit this "
               "(at least min_timed_calls, at most the request's timing trials)");
      s.integer("min_timed_calls", k.min_timed_calls, 1, 1 << 20, "timed calls per side, at least");
      k.ship_bytes = int64_t(ship_mib * mib);
      k.large_bytes = int64_t(large_mib * mib);
    });
  });
  v.section("remote", "backend remote: a Redis stream served by `turnrl eval-worker`", [&](auto& m) {
    m.text("redis_url", o.remote.redis_url, "redis://host:port");
    m.choice("worker_backend", o.remote.worker_backend, {"cpu", "cuda", "python"},
             "cpu | cuda | python: what the eval-workers run; picks the built-in task suite");
    m.text("stream", o.remote.stream, "request stream name");
    m.number("deadline_seconds", o.remote.deadline_seconds, 0.01, 1e7, "per request; then a timeout result");
    m.number("visibility_timeout_seconds", o.remote.visibility_timeout_seconds, 0.01, 1e7,
             "unacknowledged work is reclaimed after this");
    m.number("result_ttl_seconds", o.remote.result_ttl_seconds, 1, 1e9, "stored results expire after this");
    m.integer("max_deliveries", o.remote.max_deliveries, 1, 1000, "a request delivered more often is answered as a crash");
    m.flag("cached_reference_timing", o.remote.cached_reference_timing, "cpu: reference timed once per task and device kind");
    m.number("reference_ttl_seconds", o.remote.reference_ttl_seconds, 1, 1e9, "cached reference timings expire after this");
  });
}

void read_evaluator_config(ConfigReader& r, EvaluatorConfig& o) { read_described(r, o); }

void write_evaluator_config(ConfigWriter& w, const EvaluatorConfig& o) { write_described(w, o); }

std::shared_ptr<KernelEvaluator> make_evaluator(const EvaluatorConfig& c) {
  if (c.backend == "cpu") {
    CpuEvalOptions o;
    o.workers = int(c.workers);
    o.cache_dir = c.cache_dir;
    o.compile_seconds = c.compile_seconds;
    o.warmup = int(c.warmup);
    o.limits.wall_seconds = o.limits.cpu_seconds = c.wall_seconds;
    o.limits.isolation = parse_sandbox_isolation(c.sandbox, "evaluator.sandbox");
    return std::make_shared<CpuEvaluator>(o);
  }
  if (c.backend == "python") return make_python_evaluator(c);
#ifdef TURNRL_WITH_REDIS
  if (c.backend == "remote") return make_remote_evaluator(c);
#endif
#ifdef TURNRL_WITH_CUDA
  if (c.backend == "cuda") {
    CudaEvalOptions o;
    for (int64_t d : c.cuda.devices) o.devices.push_back(int(d));
    if (c.workers > 0) o.workers_per_device = int(c.workers);
    o.cache_dir = c.cache_dir.empty() ? "" : c.cache_dir + "/cuda";
    o.compile_seconds = c.compile_seconds;
    o.warmup = int(c.warmup);
    o.l2_flush_mib = c.cuda.l2_flush_mib;
    o.limits.wall_seconds = o.limits.cpu_seconds = c.wall_seconds;
    o.limits.isolation = parse_sandbox_isolation(c.sandbox, "evaluator.sandbox");
    return std::make_shared<CudaEvaluator>(o);
  }
#endif
  fail("evaluator.backend: '{}' is not built into this turnrl; built here: {}", c.backend,
       fmt::join(built_evaluator_backends(), ", "));
}

}  // namespace turnrl
