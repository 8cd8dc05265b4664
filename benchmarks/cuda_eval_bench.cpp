// CUDA evaluator throughput (device only): the 8 tasks' honest kernel-form candidates
// (tests/kernels/cuda_candidates.h), each evaluated as KernelGYM does (5 correctness trials, 100
// timed trials) on one GPU, by one worker and by the default pool (4 workers sharing the GPU's
// measurement lock, compiles in parallel). Rows:
//   cold    every source new (a training step's case): NVRTC compile in the evaluation
//   cached  the same sources again: compile served from the parent's object cache
//   launchers, cold   the honest launcher-form candidates with new sources: nvcc compiles
// First line (any machine with the CUDA toolkit): NVRTC compile time, one sandboxed process per
// compile against the evaluator's compile servers.
// Per-candidate overhead = wall time of an evaluation minus its timed GPU work (100 x (reference +
// candidate) medians), i.e. everything the evaluator adds. Baseline, same run: the same candidates
// through benchmarks/device/cuda_eval_baseline.py (a fresh Python process per evaluation,
// torch.utils.cpp_extension.load_inline, CUDA events), the way a subprocess-per-task evaluator works.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "bench_util.h"
#include "kernels/cuda_candidates.h"
#include "kernels/cuda_compile.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/kernels/cuda_backend.h"

using namespace turnrl;

namespace {

struct Row {
  std::string name;
  double evals_per_gpu_s = 0, overhead_ms = 0, compile_ms = 0, wall_s = 0;
  double correctness_ms = 0, timing_ms = 0, profiling_ms = 0;  // the worker's phases, per evaluation
  int correct = 0, n = 0;
};

Row measure(const std::string& name, CudaEvaluator& e, const std::vector<EvalRequest>& reqs) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = e.evaluate(reqs);
  Row row;
  row.name = name;
  row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  row.n = int(reqs.size());
  double overhead = 0, compile = 0;
  for (size_t i = 0; i < res.size(); ++i) {
    const EvalResult& r = res[i];
    row.correct += r.correct;
    const double timed = 1e-6 * r.candidate_time.trials * (r.candidate_time.median_us + r.reference_time.median_us);
    overhead += r.wall_seconds - timed;
    const CudaEvaluator::PhaseSeconds& p = e.last_phase_seconds()[i];
    compile += p.compile;
    row.correctness_ms += 1e3 * p.correctness / double(reqs.size());
    row.timing_ms += 1e3 * p.timing / double(reqs.size());
    row.profiling_ms += 1e3 * p.profiling / double(reqs.size());
    if (!r.correct)
      std::printf("  note: %s not correct: %s %s%s\n", reqs[i].task.c_str(), to_string(r.error), r.message.substr(0, 200).c_str(),
                  r.hacking_reason.substr(0, 300).c_str());
  }
  row.evals_per_gpu_s = double(row.n) / row.wall_s;  // all on one GPU
  row.overhead_ms = 1e3 * overhead / double(row.n);
  row.compile_ms = 1e3 * compile / double(row.n);
  return row;
}

// Mean seconds per evaluation of the Python baseline, from its --json-out file.
double baseline_seconds(const std::string& json_path) {
  std::ifstream f(json_path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  std::smatch m;
  if (std::regex_search(s, m, std::regex(R"re("mean_cold_s"\s*:\s*([0-9.eE+-]+))re"))) return std::stod(m[1]);
  return 0;
}

// NVRTC compiles of `n` new kernel-form sources (the honest ones, a comment apart), one sandboxed
// turnrl_nvrtc process per compile (the baseline) against the evaluator's compile servers (one
// process serving them all); runs without a GPU. Prints mean ms per compile and the ratio.
void compile_rows(int n) {
#ifdef TURNRL_BENCH_NVRTC
  std::vector<std::string> sources;
  for (const auto& c : test::cuda_candidates())
    if (std::string(c.expect) == "correct" && std::string(c.kind) == "honest") sources.push_back(c.source);
  eval_detail::CudaCompiler one_shot;
  one_shot.nvrtc_program = find_helper_program("turnrl_nvrtc");
  one_shot.seconds = 120;
  eval_detail::CudaCompiler served = one_shot;
  served.nvrtc_servers = eval_detail::make_nvrtc_servers(served);
  const std::string dir = make_private_dir("turnrl-compile-bench");
  auto mean_ms = [&](const eval_detail::CudaCompiler& compiler, const std::string& tag, bool warm) {
    auto cache = eval_detail::make_cuda_object_cache(dir + "/" + tag);
    if (warm) eval_detail::compile_cuda_candidate(*cache, compiler, sources[0] + "\n// start-up\n", "sm_90a");
    const auto t0 = std::chrono::steady_clock::now();
    int ok = 0;
    for (int i = 0; i < n; ++i)
      ok += eval_detail::compile_cuda_candidate(*cache, compiler, sources[size_t(i) % sources.size()] +
                                                    fmt::format("\n// {} {}\n", tag, i), "sm_90a").ok;
    const double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
    if (ok != n) std::printf("  note: %d of %d %s compiles failed\n", n - ok, n, tag.c_str());
    return ms;
  };
  const double baseline = mean_ms(one_shot, "one-shot", false);
  const double server = mean_ms(served, "server", true);  // its process started before the clock
  std::printf("NVRTC compile of %d new kernel-form sources (sm_90a, sandboxed): one turnrl_nvrtc process per "
              "compile %.1f ms, compile server %.1f ms (ratio %.1fx)\n", n, baseline, server, baseline / server);
  remove_private_dir(dir);
#else
  (void)n;
  std::printf("NVRTC compile rows: skipped (no CUDA toolkit at build time)\n");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured, also through a pipe
  compile_rows(args.quick ? 8 : 24);
  if (!args.device.is_cuda() || visible_cuda_devices() == 0) {
    std::printf("cuda_eval_bench: needs --device cuda and a GPU (skipped)\n");
    return 0;
  }
  std::vector<EvalRequest> honest;
  for (const auto& c : test::cuda_candidates()) {
    if (std::string(c.expect) != "correct" || std::string(c.kind) != "honest") continue;
    EvalRequest r;
    r.task = c.task;
    r.candidate = c.source;
    r.correctness_trials = 5;
    r.timing_trials = args.quick ? 20 : 100;
    honest.push_back(r);
  }
  std::vector<EvalRequest> launchers;
  for (const auto& c : test::cuda_candidates())
    if (std::string(c.kind) == "honest_launcher") {
      EvalRequest r = honest.front();
      r.task = c.task;
      r.candidate = c.source;
      launchers.push_back(r);
    }
  const int rounds = args.quick ? 1 : 3;
  std::vector<Row> rows;
  for (int workers : {1, CudaEvalOptions().workers_per_device}) {
    CudaEvalOptions o;
    o.devices = {0};
    o.workers_per_device = workers;
    o.cache_dir = "/tmp/turnrl-cuda-bench-cache";
    std::system(("rm -rf " + o.cache_dir).c_str());
    CudaEvaluator e(o);
    const auto start = std::chrono::steady_clock::now();
    e.evaluate(std::vector<EvalRequest>(size_t(workers), honest[0]));  // worker start-up (CUDA context, LibTorch)
    std::printf("%d worker(s) ready and first evaluations done in %.1f s; %zu honest candidates\n", workers,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), honest.size());
    const std::string pool = fmt::format(", {} worker(s)", workers);
    std::vector<EvalRequest> fresh;
    for (int round = 0; round < rounds; ++round) {
      fresh = honest;
      for (auto& r : fresh) r.candidate += "\n// round " + std::to_string(round) + ": a new source\n";
      rows.push_back(measure("cold (new sources, NVRTC)" + pool, e, fresh));
      std::printf("round %d: %d/%d correct in %.2f s (per evaluation: correctness %.1f ms, timing %.1f ms, profiling %.1f ms)\n",
                  round, rows.back().correct, rows.back().n, rows.back().wall_s, rows.back().correctness_ms,
                  rows.back().timing_ms, rows.back().profiling_ms);
    }
    // The last round's sources again: every object is in the cache now (the plain `honest` sources
    // were never compiled here, bar the first one of the start-up).
    rows.push_back(measure("cached (same sources)" + pool, e, fresh));
    std::printf("cached: %d/%d correct in %.2f s\n", rows.back().correct, rows.back().n, rows.back().wall_s);
    std::vector<EvalRequest> fresh_launchers = launchers;
    for (auto& r : fresh_launchers) r.candidate += fmt::format("\n// {} worker(s): a new source\n", workers);
    rows.push_back(measure("launchers, cold (new sources, nvcc)" + pool, e, fresh_launchers));
    std::printf("launchers: %d/%d correct in %.2f s, compile %.0f ms each\n", rows.back().correct, rows.back().n,
                rows.back().wall_s, rows.back().compile_ms);
  }

  auto print_table_head = [] {
    std::printf("\n| run | evaluations | correct | evals / GPU-second | evals / GPU-hour | overhead / eval (ms) | compile / eval (ms) |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
  };
  auto print_rows = [&] {
    for (const auto& r : rows)
      std::printf("| turnrl %s | %d | %d | %.2f | %.0f | %.1f | %.1f |\n", r.name.c_str(), r.n, r.correct, r.evals_per_gpu_s,
                  3600 * r.evals_per_gpu_s, r.overhead_ms, r.compile_ms);
  };
  // turnrl's rows first: the baseline's load_inline builds take minutes and may be cut short.
  print_table_head();
  print_rows();

  std::string baseline_json = "/tmp/turnrl-cuda-eval-baseline.json";
  const char* src = std::getenv("TURNRL_SOURCE_DIR");
  const std::string script = std::string(src ? src : TURNRL_SOURCE_DIR) + "/benchmarks/device/cuda_eval_baseline.py";
  // Three tasks (one per level), cold only: each load_inline build takes tens of seconds.
  // TURNRL_CUDA_BENCH_BASELINE_TASKS picks fewer where device time is short.
  const char* baseline_tasks = std::getenv("TURNRL_CUDA_BENCH_BASELINE_TASKS");
  const std::string tasks = baseline_tasks && *baseline_tasks ? baseline_tasks : "relu_bias,softmax_rows,matmul_bias_relu";
  const int baseline_n = int(std::count(tasks.begin(), tasks.end(), ',')) + 1;
  const std::string cmd = "python3 " + script + " --no-warm --tasks " + tasks + " --trials " +
                          std::to_string(honest[0].timing_trials) + " --json-out " + baseline_json +
                          " > /tmp/turnrl-cuda-eval-baseline.txt 2>&1";
  std::printf("baseline: %s\n", cmd.c_str());
  const int rc = std::system(cmd.c_str());
  const double base_s = baseline_seconds(baseline_json);
  std::system("tail -n 14 /tmp/turnrl-cuda-eval-baseline.txt");

  print_table_head();
  print_rows();
  if (base_s > 0) {
    std::printf("| baseline: fresh python3 + load_inline per evaluation | %d | - | %.3f | %.0f | - | - |\n", baseline_n,
                1 / base_s, 3600 / base_s);
    double cold = 0;
    for (const auto& r : rows)
      if (r.name.rfind("cold", 0) == 0) cold += r.evals_per_gpu_s / double(rounds);
    std::printf("\nratio (turnrl cold / baseline): %.1fx evaluations per GPU-hour (goal >= 20x; anchors: a fresh Python "
                "process costs 3.4-4.3 s, 330-400 evals/GPU-hour/worker)\n",
                cold * base_s);
  } else {
    std::printf("\nbaseline did not run (rc %d); see /tmp/turnrl-cuda-eval-baseline.txt\n", rc);
  }
  return 0;
}
