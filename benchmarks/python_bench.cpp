// The Python backend (KernelBench format), two parts:
//  1. checks: every candidate under data/python_candidates/<task>/ (honest, broken, and the planted
//     hacks) is evaluated and its verdict compared with the expectation on its first line; a table
//     with PASS/FAIL per candidate. The exit status is 1 when any check fails.
//  2. benchmark: the honest candidates, evaluated by the persistent worker pool and by the baseline
//     "fresh python3 interpreter per evaluation" (what a subprocess-per-task evaluator does:
//     KernelGYM's MAX_TASKS_PER_WORKER=1), same tasks, same run. Per-candidate overhead = the
//     evaluation's wall time minus the candidate's own timed calls. Then where an evaluation's time
//     goes (median seconds of each phase, PythonEvaluator::last_phase_seconds), and the wait for a
//     worker when one is retired, with and without a spare started ahead.
//     --new-candidates: every evaluation's candidate text is one no earlier evaluation of the run
//     has seen (a comment line inside each function, so Triton's cache misses as well).
// Usage: python_bench [--device cpu|cuda|auto] [--tasks FILE] [--candidates DIR] [--python EXE]
//                     [--checks-only | --bench-only] [--filter PREFIX] [--evals N] [--quick]
//                     [--no-network-isolation] [--rlimits-only] [--new-candidates] [--correctness-trials N]
//                     [--timing-trials N] [--workers-per-device N] [--exclusive auto|on|off]
//                     [--retire-after N] [--no-replacement]
// --rlimits-only: workers without namespaces (evaluator.sandbox: rlimits-only), where only Landlock
//     keeps a candidate's native file writes inside the worker's folders (native_write_outside.py).
// Defaults: cpu -> data/python_tasks/cpu.jsonl, cuda -> data/python_tasks/kernelbench_gpu.jsonl.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/python_candidates.h"
#include "turnrl/kernels/python_backend.h"

using namespace turnrl;

namespace {

struct Options {
  std::string device = "cpu", tasks, candidates, python = "python3", filter, exclusive = "auto";
  bool checks = true, bench = true, quick = false, isolate_network = true, new_candidates = false, replacement = true,
       rlimits_only = false;
  int evals = 16, correctness_trials = 5, timing_trials = 20, workers_per_device = 0, retire_after = 20;
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
    else if (a == "--rlimits-only") o.rlimits_only = true;
    else if (a == "--new-candidates") o.new_candidates = true;
    else if (a == "--correctness-trials") o.correctness_trials = std::max(1, std::atoi(value().c_str()));
    else if (a == "--timing-trials") o.timing_trials = std::max(1, std::atoi(value().c_str()));
    else if (a == "--workers-per-device") o.workers_per_device = std::max(0, std::atoi(value().c_str()));
    else if (a == "--exclusive") o.exclusive = value();
    else if (a == "--retire-after") o.retire_after = std::max(1, std::atoi(value().c_str()));
    else if (a == "--no-replacement") o.replacement = false;
    else {
      std::fprintf(stderr,
                   "usage: python_bench [--device cpu|cuda|auto] [--tasks FILE] [--candidates DIR] [--python EXE] "
                   "[--checks-only|--bench-only] [--filter PREFIX] [--evals N] [--quick] [--no-network-isolation] [--rlimits-only] "
                   "[--new-candidates] [--correctness-trials N] [--timing-trials N] [--workers-per-device N] "
                   "[--exclusive auto|on|off] [--retire-after N] [--no-replacement]\n");
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
  std::map<std::string, double> phase_median_s;  // over the evaluations (a phase absent counts 0)
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::map<std::string, double> phase_medians(const std::vector<std::map<std::string, double>>& evaluations) {
  std::set<std::string> names;
  for (const auto& phases : evaluations)
    for (const auto& entry : phases) names.insert(entry.first);
  std::map<std::string, double> out;
  for (const std::string& name : names) {
    std::vector<double> v;
    for (const auto& phases : evaluations) v.push_back(phases.count(name) ? phases.at(name) : 0.0);
    out[name] = median_of(v);
  }
  return out;
}

// The candidate's text made new for evaluation n: a comment line after every `def` line, inside
// each function's source (Triton hashes a kernel's source text, so its compile cache misses too).
std::string new_variant(const std::string& source, size_t n) {
  std::string out;
  size_t start = 0;
  while (start < source.size()) {
    const size_t end = std::min(source.find('\n', start), source.size());
    const std::string line = source.substr(start, end - start);
    out += line + "\n";
    const size_t indent = line.find_first_not_of(" \t");
    if (indent != std::string::npos && line.compare(indent, 4, "def ") == 0)
      out += std::string(indent + 4, ' ') + fmt::format("# python_bench variant {}\n", n);
    start = end + 1;
  }
  return out;
}

Row measure(const std::string& name, PythonEvaluator& e, const std::vector<EvalRequest>& reqs, int* failures) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = e.evaluate(reqs);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Row r{name, int(reqs.size()), double(reqs.size()) / wall, 0, phase_medians(e.last_phase_seconds())};
  for (const auto& x : res) {
    const double own = x.candidate_time.median_us * x.candidate_time.trials * 1e-6;
    r.overhead_ms += (x.wall_seconds - own) * 1e3 / double(res.size());
    if (!x.correct) {
      ++*failures;
      std::printf("  benchmark candidate not correct: %s %s%s\n", test::verdict_of(x).c_str(),
                  x.message.substr(0, 300).c_str(), x.hacking_reason.substr(0, 400).c_str());
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
  if (o.rlimits_only) base.limits.isolate(SandboxIsolation::rlimits_only);
  base.workers_per_device = o.workers_per_device;
  base.exclusive_measurement = o.exclusive;
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
  std::printf("python_bench: device %s, %d worker(s), measurements %s, first worker ready in %.2f s: %s\n",
              pool->device().c_str(), pool->pool_size(), pool->exclusive_measurement() ? "exclusive" : "concurrent",
              start_s, info.c_str());
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
    // Candidates named stray_* leave a process running: each costs its worker, no other does.
    const int strays = int(std::count_if(cands.begin(), cands.end(), [](const auto& c) { return c.name.rfind("stray_", 0) == 0; }));
    std::printf("workers replaced for a process left running: %d (candidates named stray_*: %d)\n",
                pool->stray_process_restarts(), strays);
    if (pool->stray_process_restarts() != strays)
      misses.push_back(std::to_string(pool->stray_process_restarts()) + " workers replaced for stray processes, " +
                       std::to_string(strays) + " stray_* candidates");
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
    // Evaluation k's request: in --new-candidates mode a text no other evaluation of the run has seen.
    const auto request = [&](size_t k, size_t variant) {
      test::PythonCandidate c = honest[k % honest.size()];
      if (o.new_candidates) c.source = new_variant(c.source, variant);
      return test::python_request(c, o.correctness_trials, o.timing_trials, 0);
    };
    size_t variants = 0;  // texts handed out so far
    const auto requests = [&](size_t count) {
      std::vector<EvalRequest> out;
      for (size_t k = 0; k < count; ++k) out.push_back(request(k, variants++));
      return out;
    };
    int bad = 0;
    // Every worker of the pool is started before measuring.
    pool->evaluate(requests(size_t(pool->pool_size())));
    const std::vector<EvalRequest> reqs = requests(n);
    // An interpreter start costs seconds: the baseline runs half as many (at least 4); rates compare.
    const std::vector<EvalRequest> head = requests(std::max<size_t>(std::min<size_t>(4, n), n / 2));
    std::vector<Row> rows;
    PythonEvalOptions fresh = base;
    fresh.fresh_worker_per_eval = true;
    PythonEvaluator baseline(tasks, fresh);
    // Same pool size; each evaluation pays an interpreter start, the torch import and the warm-up.
    rows.push_back(measure("baseline: fresh python3 per evaluation", baseline, head, &bad));
    rows.push_back(measure("persistent worker pool", *pool, reqs, &bad));
    std::printf(
        "\n== benchmark: honest candidates (%zu, over %zu tasks)%s, %d correctness trials + %d timed calls per "
        "side, %d workers (measurements %s), both configurations in this run\n",
        honest.size(), tasks.size(), o.new_candidates ? ", every evaluation a new candidate text" : "",
        o.correctness_trials, o.timing_trials, pool->pool_size(),
        pool->exclusive_measurement() ? "exclusive per device" : "concurrent");
    std::printf("%-42s %8s %12s %14s %22s %14s\n", "configuration", "evals", "evals/s", "evals/hour",
                "overhead/cand (ms)", "vs baseline");
    for (const auto& r : rows)
      std::printf("%-42s %8d %12.2f %14.0f %22.1f %13.1fx\n", r.name.c_str(), r.evals, r.evals_per_s,
                  3600 * r.evals_per_s, r.overhead_ms, rows[0].overhead_ms / std::max(1e-9, r.overhead_ms));
    std::printf("(vs baseline = baseline overhead / this overhead; evals/hour on this machine's %s)\n",
                pool->device() == "cuda" ? "GPU(s)" : "CPU");
    // Where an evaluation's time goes: each worker request's handling time in the worker ("timing.
    // candidate"), its parts ("candidate.first_call"), its round trip as this process saw it, and
    // this process's own work; median seconds over the evaluations just measured.
    std::printf("\n== phases: median ms per evaluation (PythonEvaluator::last_phase_seconds)\n");
    std::printf("| %-32s | %12s | %12s |\n|%s|%s|%s|\n", "phase", "baseline", "pool", std::string(34, '-').c_str(),
                std::string(14, '-').c_str(), std::string(14, '-').c_str());
    std::set<std::string> names;
    for (const auto& r : rows)
      for (const auto& entry : r.phase_median_s) names.insert(entry.first);
    for (const std::string& name : names) {
      const auto ms = [&](const Row& r) {
        return r.phase_median_s.count(name) ? 1e3 * r.phase_median_s.at(name) : 0.0;
      };
      std::printf("| %-32s | %12.1f | %12.1f |\n", name.c_str(), ms(rows[0]), ms(rows[1]));
    }

    // Replacing a retired worker: one worker, retired after --retire-after evaluations, without and
    // with a spare started ahead; the wait is the evaluations' worker_wait past the pool's first start.
    if (o.replacement) {
      std::printf("\n== worker replacement: 1 worker retired every %d evaluations\n", o.retire_after);
      std::printf("%-34s %14s %22s\n", "configuration", "replacements", "mean wait (ms)");
      for (const bool spare : {false, true}) {
        PythonEvalOptions one = base;
        one.workers = 1;
        one.max_evals_per_worker = o.retire_after;
        one.spare_worker = spare;
        PythonEvaluator e(tasks, one);
        e.evaluate(requests(1));
        const auto res = e.evaluate(requests(size_t(3 * o.retire_after)));
        double wait = 0;
        int replacements = 0;
        for (const auto& phases : e.last_phase_seconds())
          if (phases.count("worker_wait")) wait += phases.at("worker_wait"), ++replacements;
        for (const auto& x : res) bad += !x.correct;
        std::printf("%-34s %14d %22.1f\n", spare ? "spare worker started ahead" : "no spare (start on demand)",
                    replacements, replacements ? 1e3 * wait / replacements : 0.0);
      }
    }
    failed += bad;
  }
  return failed ? 1 : 0;
}
