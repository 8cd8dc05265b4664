// Large KernelBench-style problems through the Python backend (docs/evaluator.md, "Large problems"):
// the three problems of data/python_tasks/large.jsonl scaled to --elements input elements (the
// element-wise sigmoid and the row-sum reduction; the level-2 GEMM + GELU + scale to an eighth of
// that on CUDA, a 64th on CPU, where a GEMM of an eighth takes minutes per call), each evaluated with the reference itself as the candidate (right verdict: correct on CPU;
// on CUDA correct outputs, then no_candidate_work, since no kernel of its own runs). Baseline, same
// run, same problems: benchmarks/python_bigproblems_baseline.py, the KernelBench-eval way (inputs
// from get_inputs() on the host, moved to the device, torch.allclose, timed calls per side).
// Prints per-problem seconds and evaluations per GPU-hour (per device-hour on CPU) for both, and
// their ratio. The worker's start (interpreter, torch import, warm-up) is paid before timing, as a
// persistent pool pays it once.
// Usage: python_bigproblems_bench [--device cpu|cuda] [--elements N] [--python EXE] [--trials N] [--timed N]
//                                  [--no-network-isolation]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/python_candidates.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/python_backend.h"

using namespace turnrl;

namespace {

struct Options {
  std::string device = "cpu", python;
  int64_t elements = 0;  // 0: 1 G on cuda, 64 M on cpu
  int trials = 5, timed = 100;
  bool isolate_network = true;
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
    else if (a == "--elements") o.elements = std::stoll(value());
    else if (a == "--python") o.python = value();
    else if (a == "--trials") o.trials = std::stoi(value());
    else if (a == "--timed") o.timed = std::stoi(value());
    else if (a == "--no-network-isolation") o.isolate_network = false;
    else {
      std::fprintf(stderr,
                   "usage: python_bigproblems_bench [--device cpu|cuda] [--elements N] [--python EXE] [--trials N] "
                   "[--timed N] [--no-network-isolation]\n");
      std::exit(2);
    }
  }
  if (o.device != "cpu" && o.device != "cuda") std::fprintf(stderr, "--device: cpu or cuda\n"), std::exit(2);
  if (o.elements <= 0) o.elements = o.device == "cuda" ? int64_t(1) << 30 : int64_t(1) << 26;
  return o;
}

// The task's reference with its module-level batch_size set so that the problem has `elements`
// input elements (batch_size x the other input dimension, read from the reference).
std::string scaled_reference(const PythonTask& t, int64_t elements) {
  std::smatch m;
  const std::regex other("\\n(dim|in_features) = ([0-9]+)\\n");
  if (!std::regex_search(t.reference, m, other)) fail("task '{}': no dim or in_features to scale by", t.id);
  const int64_t per_row = std::stoll(m[2].str());
  const int64_t rows = std::max<int64_t>(1, elements / per_row);
  return std::regex_replace(t.reference, std::regex("\\nbatch_size = [0-9]+\\n"), fmt::format("\nbatch_size = {}\n", rows));
}

int64_t elements_of(const PythonTask& t, const Options& o) {
  return t.level == 2 ? o.elements / (o.device == "cuda" ? 8 : 64) : o.elements;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Options o = parse(argc, argv);
  const std::string python = resolve_python_executable(o.python);
  const std::string source = test::turnrl_data_dir() + "/..";
  PythonTaskSet tasks = load_python_tasks(test::turnrl_data_dir() + "/python_tasks/large.jsonl");
  const std::string scaled_file = "/tmp/turnrl_bigproblems_" + std::to_string(::getpid()) + ".jsonl";
  {
    std::ofstream out(scaled_file);
    for (auto& t : tasks.tasks) {
      t.reference = scaled_reference(t, elements_of(t, o));
      t.extra_shapes.clear();  // the baseline has none; a large problem skips them anyway
      nlohmann::json line = {{"id", t.id}, {"backend", "python"}, {"level", t.level}, {"reference", t.reference},
                             {"metadata", {{"device", "any"}}}};
      out << line.dump() << "\n";
    }
  }
  PythonEvalOptions opt;
  opt.executable = python;
  opt.device = o.device;
  opt.workers = 1;
  opt.limits.wall(600).cpu(600);
  opt.limits.isolate_network = o.isolate_network;
  PythonEvaluator evaluator(tasks, opt);
  std::printf("worker: %s\n", evaluator.worker_info().c_str());
  std::printf("%d correctness trials, %d timed calls asked per side; %lld input elements (level 2: fewer)\n\n",
              o.trials, o.timed, static_cast<long long>(o.elements));
  std::printf("%-24s %12s %10s %-26s %10s %8s %12s %12s %8s\n", "problem", "elements", "turnrl s", "turnrl verdict",
              "naive s", "naive ok", "turnrl /h", "naive /h", "ratio");
  int failures = 0;
  for (const auto& t : tasks.tasks) {
    EvalRequest req;
    req.task = t.id;
    req.candidate = std::regex_replace(t.reference, std::regex("class Model\\("), "class ModelNew(");
    req.correctness_trials = o.trials;
    req.timing_trials = o.timed;
    req.seed = 1;
    const auto t0 = std::chrono::steady_clock::now();
    const EvalResult r = evaluator.evaluate({req}).at(0);
    const double ours = seconds_since(t0);
    const std::string cmd = fmt::format("'{}' '{}/benchmarks/python_bigproblems_baseline.py' '{}' '{}' '{}' {} {}",
                                        python, source, scaled_file, t.id, o.device, o.trials, o.timed);
    const auto t1 = std::chrono::steady_clock::now();
    FILE* f = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (f && std::fgets(buf, sizeof buf, f)) out += buf;
    const int status = f ? pclose(f) : -1;
    const double naive_wall = seconds_since(t1);
    const nlohmann::json base = nlohmann::json::parse(out.substr(0, out.find('\n')), nullptr, false);
    const bool base_ok = status == 0 && base.is_object();
    // The baseline's own clock leaves out its interpreter start and torch import (a persistent
    // evaluator pays those once, as turnrl's pool does).
    const double naive = base_ok ? base["seconds"].get<double>() : naive_wall;
    const bool right = o.device == "cpu" ? r.correct && !r.hacked()
                                         : (r.hacking_flags & kHackNoCandidateWork) && r.max_abs_error < 1e-3;
    failures += !right;
    std::printf("%-24s %12lld %10.2f %-26s %10.2f %8s %12.0f %12.0f %7.1fx\n", t.id.c_str(),
                static_cast<long long>(elements_of(t, o)), ours,
                test::verdict_of(r).substr(0, 26).c_str(), naive,
                base_ok ? (base["correct"].get<bool>() ? "yes" : "no") : "failed", 3600.0 / ours, 3600.0 / naive,
                naive / ours);
    std::string phases;
    for (const auto& [name, seconds] : evaluator.last_phase_seconds().at(0))
      phases += fmt::format(" {} {:.2f}", name, seconds);
    std::printf("  turnrl: worker seconds per request:%s\n", phases.c_str());
    if (!right) std::printf("  turnrl: %s %s\n", r.message.c_str(), r.hacking_reason.c_str());
    if (!base_ok) std::printf("  baseline: exit %d: %s\n", status, out.c_str());
    else std::printf("  baseline: %.2f s of it building inputs on the host\n", base["input_seconds"].get<double>());
  }
  std::remove(scaled_file.c_str());
  return failures ? 1 : 0;
}
