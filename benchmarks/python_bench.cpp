// The Python backend (KernelBench format), two parts:
//  1. checks: every candidate under data/python_candidates/<task>/ (honest, broken, and the planted
//     hacks) is evaluated and its verdict compared with the expectation on its first line; a table
//     with PASS/FAIL per candidate. The exit status is 1 when any check fails.
//  2. benchmark: the honest candidates, evaluated by the persistent worker pool and by the baseline
//     "fresh python3 interpreter per evaluation" (what a subprocess-per-task evaluator does:
//     KernelGYM's MAX_TASKS_PER_WORKER=1), same tasks, same run, same pool size. Per-candidate
//     overhead = the evaluation's wall time minus the candidate's own timed calls.
// Usage: python_bench [--device cpu|cuda|auto] [--tasks FILE] [--candidates DIR] [--python EXE]
//                     [--checks-only | --bench-only] [--filter PREFIX] [--evals N] [--quick]
//                     [--no-network-isolation]
// Defaults: cpu -> data/python_tasks/cpu.jsonl, cuda -> data/python_tasks/kernelbench_gpu.jsonl.
#include <chrono>
#include <cstdio>
#include <map>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/python_candidates.h"
#include "turnrl/kernels/python_backend.h"

using namespace turnrl;

namespace {

struct Options {
  std::string device = "cpu", tasks, candidates, python = "python3", filter;
  bool checks = true, bench = true, quick = false, isolate_network = true;
  int evals = 16;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::fprintf(stderr, "%s needs a value\n", a.c_str()), std::exit(2);
      return argv[++i];
    };
    if (a == "--device") o.device = value();
    else if (a == "--tasks") o.tasks = value();
    else if (a == "--candidates") o.candidates = value();
    else if (a == "--python") o.python = value();
    else if (a == "--checks-only") o.bench = false;
    else if (a == "--bench-only") o.checks = false;
    else if (a == "--quick") o.quick = true, o.evals = 8;
    else if (a == "--filter") o.filter = value();
    else if (a == "--evals") o.evals = std::max(1, std::atoi(value().c_str()));
    else if (a == "--no-network-isolation") o.isolate_network = false;
    else {
      std::fprintf(stderr,
                   "usage: python_bench [--device cpu|cuda|auto] [--tasks FILE] [--candidates DIR] [--python EXE] "
                   "[--checks-only|--bench-only] [--filter PREFIX] [--evals N] [--quick] [--no-network-isolation]\n");
      std::exit(2);
    }
  }
  const std::string data = test::turnrl_data_dir();
  if (o.tasks.empty())
    o.tasks = data + (o.device == "cuda" ? "/python_tasks/kernelbench_gpu.jsonl" : "/python_tasks/cpu.jsonl");
  if (o.candidates.empty()) o.candidates = data + "/python_candidates";
  return o;
}

struct Row {
  std::string name;
  int evals = 0;
  double evals_per_s = 0, overhead_ms = 0;
};

Row measure(const std::string& name, PythonEvaluator& e, const std::vector<EvalRequest>& reqs, int* failures) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = e.evaluate(reqs);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Row r{name, int(reqs.size()), double(reqs.size()) / wall, 0};
  for (const auto& x : res) {
    const double own = x.candidate_time.median_us * x.candidate_time.trials * 1e-6;
    r.overhead_ms += (x.wall_seconds - own) * 1e3 / double(res.size());
    if (!x.correct) {
      ++*failures;
      std::printf("  benchmark candidate not correct: %s %s\n", test::verdict_of(x).c_str(),
                  x.message.substr(0, 300).c_str());
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows survive a time limit when the output is piped
  const Options o = parse(argc, argv);
  PythonTaskSet tasks;
  try {
    tasks = load_python_tasks(o.tasks);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "python_bench: %s\n", e.what());
    return 2;
  }
  PythonEvalOptions base;
  base.executable = o.python;
  base.device = o.device;
  base.limits.isolate_network = o.isolate_network;
  std::unique_ptr<PythonEvaluator> pool;
  try {
    pool = std::make_unique<PythonEvaluator>(tasks, base);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "python_bench: %s\n", e.what());
    return 2;
  }
  const auto t_start = std::chrono::steady_clock::now();
  std::string info;
  try {
    info = pool->worker_info();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "python_bench: FAIL: the first worker did not start: %s\n", e.what());
    return 1;
  }
  const double start_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("python_bench: device %s, %d worker(s), first worker ready in %.2f s: %s\n", pool->device().c_str(),
              pool->pool_size(), start_s, info.c_str());
  std::printf("tasks: %s (%zu)\n", o.tasks.c_str(), tasks.size());
  int failed = 0;

  if (o.checks) {
    const auto cands = test::python_candidates(o.candidates, tasks, o.filter);
    std::vector<EvalRequest> reqs;
    for (const auto& c : cands) reqs.push_back(test::python_request(c, 3, o.quick ? 10 : 30, 0));
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = pool->evaluate(reqs);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("\n== checks: %zu candidates in %.1f s (%d worker starts so far)\n", cands.size(), wall,
                pool->worker_starts());
    std::printf("%-20s %-30s %-34s %-44s %7s %s\n", "task", "candidate", "expect", "got", "wall s", "verdict");
    int passed = 0;
    std::vector<std::string> misses;
    for (size_t i = 0; i < cands.size(); ++i) {
      std::string why;
      const bool ok = test::meets(res[i], cands[i].expect, &why);
      passed += ok;
      std::string got = test::verdict_of(res[i]);
      if (res[i].correct)
        got += fmt::format(" ({:.1f}/{:.1f} us)", res[i].reference_time.median_us, res[i].candidate_time.median_us);
      std::printf("%-20s %-30s %-34s %-44s %7.2f %s\n", cands[i].task.c_str(), cands[i].name.c_str(),
                  cands[i].expect.c_str(), got.substr(0, 44).c_str(), res[i].wall_seconds, ok ? "PASS" : "FAIL");
      if (!ok) misses.push_back(cands[i].task + "/" + cands[i].name + ": " + why.substr(0, 1500));
    }
    std::printf("checks: %d passed, %zu failed\n", passed, cands.size() - size_t(passed));
    for (const auto& m : misses) std::printf("FAIL %s\n", m.c_str());
    failed += int(misses.size());
  }

  if (o.bench) {
    const auto honest = test::python_candidates(o.candidates, tasks, "honest");
    if (honest.empty()) {
      std::printf("benchmark: no honest candidates under %s\n", o.candidates.c_str());
      return failed ? 1 : 0;
    }
    const size_t n = size_t(o.evals);
    std::vector<EvalRequest> reqs;
    for (size_t i = 0; i < n; ++i) reqs.push_back(test::python_request(honest[i % honest.size()], 5, 20, 0));
    // An interpreter start costs seconds: the baseline runs the first half (at least 4); rates compare.
    const std::vector<EvalRequest> head(reqs.begin(), reqs.begin() + std::max<size_t>(std::min<size_t>(4, n), n / 2));
    int bad = 0;
    // Every worker of the pool is started before measuring.
    pool->evaluate(std::vector<EvalRequest>(size_t(pool->pool_size()), reqs[0]));
    std::vector<Row> rows;
    PythonEvalOptions fresh = base;
    fresh.fresh_worker_per_eval = true;
    PythonEvaluator baseline(tasks, fresh);
    // Same pool size; each evaluation pays an interpreter start, the torch import and the warm-up.
    rows.push_back(measure("baseline: fresh python3 per evaluation", baseline, head, &bad));
    rows.push_back(measure("persistent worker pool", *pool, reqs, &bad));
    // Where a pool evaluation's time goes: each worker request's handling time in the worker and its
    // round trip as the parent saw it (means over the evaluations just measured).
    std::map<std::string, double> phase_means;
    for (const auto& phases : pool->last_phase_seconds())
      for (const auto& [name, seconds] : phases) phase_means[name] += 1e3 * seconds / double(reqs.size());
    std::string phase_line;
    for (const auto& [name, ms] : phase_means) phase_line += fmt::format(" {} {:.1f} ms,", name, ms);
    std::printf("pool, per evaluation:%s\n", phase_line.empty() ? " (no phases)" : phase_line.substr(0, phase_line.size() - 1).c_str());
    std::printf(
        "\n== benchmark: honest candidates (%zu, over %zu tasks), 5 correctness trials + 20 timed calls per "
        "evaluation, %d workers, both configurations in this run\n",
        honest.size(), tasks.size(), pool->pool_size());
    std::printf("%-42s %8s %12s %22s %14s\n", "configuration", "evals", "evals/s", "overhead/cand (ms)", "vs baseline");
    for (const auto& r : rows)
      std::printf("%-42s %8d %12.2f %22.1f %13.1fx\n", r.name.c_str(), r.evals, r.evals_per_s, r.overhead_ms,
                  rows[0].overhead_ms / std::max(1e-9, r.overhead_ms));
    std::printf("(vs baseline = baseline overhead / this overhead)\n");
    failed += bad;
  }
  return failed ? 1 : 0;
}
