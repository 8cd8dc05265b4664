#include "turnrl/kernels/backends.h"

#include <fmt/format.h>

#include "turnrl/core/config_reader.h"
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

void read_evaluator_config(ConfigReader& r, EvaluatorConfig& o) {
  r.choice("backend", o.backend, {"cpu", "cuda", "python", "remote"})
      .integer("workers", o.workers, 0, 4096)
      .text("cache_dir", o.cache_dir)
      .number("compile_seconds", o.compile_seconds, 0.1, 1e5)
      .integer("warmup", o.warmup, 0, 1000)
      .number("wall_seconds", o.wall_seconds, 0.1, 1e5)
      .choice("sandbox", o.sandbox, {"namespaces", "rlimits-only"});
  {
    ConfigReader s = r.section("cuda");
    s.integers("devices", o.cuda.devices, 0, 1023).number("l2_flush_mib", o.cuda.l2_flush_mib, 0, 1 << 20);
    s.finish();
  }
  {
    ConfigReader s = r.section("python");
    s.text("executable", o.python.executable)
        .choice("device", o.python.device, {"cpu", "cuda", "auto"})
        .text("tasks_file", o.python.tasks_file)
        .number("startup_seconds", o.python.startup_seconds, 1, 1e5);
    s.finish();
  }
  {
    ConfigReader s = r.section("remote");
    s.text("redis_url", o.remote.redis_url)
        .choice("worker_backend", o.remote.worker_backend, {"cpu", "cuda", "python"})
        .text("stream", o.remote.stream)
        .number("deadline_seconds", o.remote.deadline_seconds, 0.01, 1e7)
        .number("visibility_timeout_seconds", o.remote.visibility_timeout_seconds, 0.01, 1e7)
        .number("result_ttl_seconds", o.remote.result_ttl_seconds, 1, 1e9)
        .integer("max_deliveries", o.remote.max_deliveries, 1, 1000)
        .flag("cached_reference_timing", o.remote.cached_reference_timing)
        .number("reference_ttl_seconds", o.remote.reference_ttl_seconds, 1, 1e9);
    s.finish();
  }
}

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
    o.workers_per_device = c.workers > 0 ? int(c.workers) : 1;
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
