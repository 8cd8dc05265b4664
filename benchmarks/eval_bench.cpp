// Evaluator throughput: a batch of 64 CPU candidates (honest, wrong, lazy and hacking ones over
// the built-in tasks), evaluated by the worker pool with a cold compile cache, then warm. Baseline,
// measured in the same run: the naive evaluator that starts fresh worker processes for every
// evaluation (what one-process-per-candidate evaluation costs), compile cache warm, on the first 16.
// Per-candidate overhead = the evaluation's wall time minus the candidate's own timed runs. The
// warm namespaces row is measured again without the densely sampled calls, their cost.
// Then the plans' speed, which the reward's speedup relies on: on the tasks whose math is exp/tanh,
// the vectorised f32 plan (vec=8 unroll=2) against the scalar f64 one (vec=1 unroll=1), same worker.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "bench_util.h"
#include "turnrl/kernels/cpu_backend.h"
#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/kernels/cpu_tasks.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/kernels/sandbox.h"

using namespace turnrl;

namespace {

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// tests/data/cpu_tasks: $TURNRL_SOURCE_DIR, else the first parent of this program that has it.
std::string candidates_dir() {
  namespace fs = std::filesystem;
  if (const char* s = std::getenv("TURNRL_SOURCE_DIR")) return std::string(s) + "/tests/data/cpu_tasks/";
  for (fs::path p = fs::read_symlink("/proc/self/exe").parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path())
    if (fs::exists(p / "tests/data/cpu_tasks")) return (p / "tests/data/cpu_tasks/").string();
  std::fprintf(stderr, "eval_bench: tests/data/cpu_tasks not found; set TURNRL_SOURCE_DIR\n");
  std::exit(2);
}

std::vector<EvalRequest> batch(size_t n) {
  const std::string data = candidates_dir();
  std::vector<EvalRequest> all;
  for (const auto& task : cpu_task_names())
    for (const auto& entry : std::filesystem::directory_iterator(data + task)) {
      EvalRequest r;
      r.task = task;
      r.candidate = read(entry.path().string());
      r.correctness_trials = 5;
      r.timing_trials = 20;
      all.push_back(r);
    }
  std::vector<EvalRequest> out;
  for (size_t i = 0; i < n; ++i) out.push_back(all[i % all.size()]);
  return out;
}

struct Row {
  std::string name;
  double evals_per_s = 0, overhead_ms = 0, compile_s = 0;
};

Row measure(const std::string& name, CpuEvaluator& e, const std::vector<EvalRequest>& reqs) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = e.evaluate(reqs);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Row r{name, double(reqs.size()) / wall, 0, 0};
  for (const auto& x : res) {
    const double own = x.candidate_time.median_us * x.candidate_time.trials * 1e-6;
    r.overhead_ms += (x.wall_seconds - own) * 1e3 / double(res.size());
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const auto args = bench::parse_args(argc, argv);
  const size_t n = args.quick ? 16 : 64;
  const auto reqs = batch(n);
  std::vector<Row> rows;
  int compiles = 0, workers = 0;
  // The sandbox's cost: the same batch under each isolation mode (sandbox.h), each with its own
  // cold cache (compiles run in the sandbox too).
  for (const SandboxIsolation mode : {SandboxIsolation::rlimits_only, SandboxIsolation::namespaces}) {
    const std::string cache = make_private_dir("turnrl-eval-bench-cache");
    CpuEvalOptions pooled;
    pooled.cache_dir = cache;
    pooled.limits.isolate(mode);
    CpuEvaluator pool(pooled);
    rows.push_back(measure(fmt::format("pool, cold compile cache, {}", to_string(mode)), pool, reqs));
    compiles = pool.compiles();
    workers = pool.pool_size();
    rows.push_back(measure(fmt::format("pool, warm compile cache, {}", to_string(mode)), pool, reqs));
    if (mode == SandboxIsolation::namespaces) {
      // What the densely sampled calls cost (CpuEvalOptions::dense_sample_period_us): the same warm
      // batch without them.
      CpuEvalOptions undense = pooled;
      undense.dense_sample_period_us = 0;
      CpuEvaluator without(undense);
      measure("", without, reqs);  // its workers start and load (the cache is warm already)
      rows.push_back(measure("pool, warm compile cache, namespaces, no dense calls", without, reqs));
      CpuEvalOptions naive = pooled;
      naive.max_evals_per_worker = 1;  // a fresh worker process for every call
      CpuEvaluator fresh(naive);
      // A worker start costs seconds, so the baseline runs the first 16 of the batch (rates compare).
      const std::vector<EvalRequest> head(reqs.begin(), reqs.begin() + std::min<size_t>(16, reqs.size()));
      rows.insert(rows.begin(), measure("baseline: process per call (16 cand.)", fresh, head));
    }
    remove_private_dir(cache);
  }

  std::printf("eval_bench: %zu CPU candidates, %d workers, %d distinct sources compiled\n", n, workers, compiles);
  std::printf("%-50s %12s %22s %10s\n", "configuration", "evals/s", "overhead/cand (ms)", "vs baseline");
  for (const auto& r : rows)
    std::printf("%-50s %12.2f %22.1f %9.2fx\n", r.name.c_str(), r.evals_per_s, r.overhead_ms,
                r.evals_per_s / rows[0].evals_per_s);

  CpuEvaluator one(CpuEvalOptions().num_workers(1));
  const TaskSet tasks = builtin_cpu_tasks();
  const std::string plan = "fusion=fused vec={} unroll={} acc={} fallback=none bounds=checked shortcut=none";
  std::printf("\n%-16s %22s %22s %8s\n", "task", "vec=8 f32 median (us)", "vec=1 f64 median (us)", "ratio");
  for (const std::string task : {"softmax_rows", "gelu_tanh", "logsumexp_rows"}) {
    std::vector<EvalRequest> pair;
    for (const std::string words : {fmt::format(plan, 8, 2, "f32"), fmt::format(plan, 1, 1, "f64")}) {
      EvalRequest r;
      r.task = task;
      r.candidate = expand_plan(tasks.find(task), words).source;
      r.correctness_trials = 1;
      r.timing_trials = 20;
      pair.push_back(r);
    }
    const std::vector<EvalResult> res = one.evaluate(pair);
    const double fast = res[0].candidate_time.median_us, slow = res[1].candidate_time.median_us;
    std::printf("%-16s %22.1f %22.1f %7.2fx\n", task.c_str(), fast, slow, fast > 0 ? slow / fast : 0.0);
  }
  return 0;
}
