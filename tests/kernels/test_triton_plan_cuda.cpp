// Kernel plans rendered as Triton programs, run by the Python evaluator on a GPU: the honest plans
// of every task (every vec x unroll, unfused, float64) are correct, and the traps get their
// verdicts -- bf16 (precision flag or mismatch), unchecked bounds (wrong on the extra shapes),
// cache (caches_results), inplace (mutates_inputs), the PyTorch fallbacks (lazy, no candidate
// work, or the forbidden op). Prints a table of verdicts and speedups. Skips (and says so) without
// a GPU, torch or Triton. Runs the way benchmarks/device/python_backend.sh does: the task file
// under $TURNRL_SOURCE_DIR (else this source tree), the worker from $TURNRL_PYTHON_WORKER (else
// the source tree), the interpreter from $TURNRL_TEST_PYTHON (else python3).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/rl/task.h"
#include "turnrl/kernels/hacking.h"
#include "turnrl/kernels/python_backend.h"
#include "kernels/plan_words.h"

using namespace turnrl;
using test::plan_words;

namespace {

std::string tasks_file() {
  const char* s = std::getenv("TURNRL_SOURCE_DIR");
  return std::string(s ? s : TURNRL_SOURCE_DIR) + "/data/python_tasks/kernelbench_gpu.jsonl";
}

std::string python() {
  const char* p = std::getenv("TURNRL_TEST_PYTHON");
  return p ? p : "python3";
}

// Why this machine cannot run the test, or "".
std::string missing() {
  const PythonRuntime rt = probe_python(python(), true);
  if (!rt.error.empty()) return python() + ": " + rt.error;
  if (!rt.has_torch) return python() + " has no torch";
  if (!rt.cuda) return "torch sees no GPU";
  if (std::system((python() + " -c 'import triton' > /dev/null 2>&1").c_str()) != 0) return python() + " has no triton";
  return "";
}

// The block sizes the traps are rendered with: what should be fast for each task's main shape
// (whole 4096-column softmax rows and 1024-column layernorm rows in registers, 64 x 64 tiles).
const std::map<std::string, std::string>& fast_sizes() {
  static const std::map<std::string, std::string> sizes = {{"kb1_gelu", "vec=4 unroll=2"},
                                                            {"kb1_softmax", "vec=8 unroll=4"},
                                                            {"kb2_layernorm_gelu", "vec=8 unroll=1"},
                                                            {"kb1_matmul", "vec=4 unroll=2"},
                                                            {"kb2_gemm_bias_relu", "vec=4 unroll=2"}};
  return sizes;
}

enum class Expect { correct, imprecise, not_correct, caches, mutates, lazy };

bool meets(const EvalResult& r, Expect e) {
  switch (e) {
    case Expect::correct: return r.correct && !r.hacked() && r.error == EvalError::none && r.speedup > 0;
    case Expect::imprecise:
      return !r.correct && ((r.hacking_flags & kHackPrecisionDowngrade) || r.error == EvalError::mismatch);
    case Expect::not_correct: return !r.correct;
    case Expect::caches: return (r.hacking_flags & kHackCachesResults) != 0;
    case Expect::mutates: return (r.hacking_flags & kHackMutatesInputs) != 0;
    case Expect::lazy: return (r.hacking_flags & (kHackLazy | kHackNoCandidateWork | kHackCallsReference)) != 0;
  }
  return false;
}

const char* name_of(Expect e) {
  switch (e) {
    case Expect::correct: return "correct";
    case Expect::imprecise: return "precision|mismatch";
    case Expect::not_correct: return "not correct";
    case Expect::caches: return "caches_results";
    case Expect::mutates: return "mutates_inputs";
    case Expect::lazy: return "lazy|no_work|calls_reference";
  }
  return "?";
}

std::string verdict(const EvalResult& r) {
  if (r.hacked()) return "hacking:" + hacking_flag_names(r.hacking_flags);
  if (r.correct) return "correct";
  return std::string("error:") + to_string(r.error);
}

struct Case {
  std::string task, words;
  Expect expect;
};

// The evaluator every case shares (one worker on the GPU, so the speedups are measured alone), or
// null with the reason printed. Workers try to run in a network namespace; where a GPU worker
// cannot start in one, without (as benchmarks/device/python_backend.sh does).
PythonEvaluator* evaluator() {
  static std::unique_ptr<PythonEvaluator> e = [] {
    PythonEvalOptions o;
    o.executable = python();
    o.device = "cuda";
    o.workers = 1;
    o.warmup = 1;
    o.profile_calls = 3;
    for (const bool isolate : {true, false}) {
      o.limits.isolate_network = isolate;
      try {
        auto made = std::make_unique<PythonEvaluator>(load_python_tasks(tasks_file()), o);
        std::cout << "worker: " << made->worker_info() << "\n";
        return made;
      } catch (const std::exception& ex) {
        std::cout << "worker start " << (isolate ? "with" : "without") << " network isolation failed: " << ex.what()
                  << "\n";
      }
    }
    return std::unique_ptr<PythonEvaluator>();
  }();
  return e.get();
}

// Evaluates every case in one batch, prints a table (and the fastest correct plan per task), then
// checks each verdict.
void run(const std::vector<Case>& cases) {
  PythonEvaluator* e = evaluator();
  REQUIRE(e);
  const TaskSet tasks = load_tasks_jsonl(tasks_file());
  std::vector<EvalRequest> requests;
  for (const Case& c : cases) {
    const PlanExpansion x = expand_plan(tasks.find(c.task), c.words);
    REQUIRE(x.error.empty());
    EvalRequest r;
    r.task = c.task;
    r.candidate = x.source;
    r.correctness_trials = 3;
    r.timing_trials = 10;
    r.seed = 7;
    requests.push_back(r);
  }
  const std::vector<EvalResult> results = e->evaluate(requests);
  REQUIRE(results.size() == cases.size());
  std::cout << fmt::format("\n{:<20} {:<82} {:<30} {:>8} {:>6} {:>10} {:>10} {:>6}  {}\n", "task", "plan", "verdict",
                           "speedup", "cov", "ref us", "cand us", "wall s", "ok");
  std::map<std::string, std::pair<double, std::string>> best;
  for (size_t i = 0; i < cases.size(); ++i) {
    const EvalResult& r = results[i];
    const bool ok = meets(r, cases[i].expect);
    std::cout << fmt::format("{:<20} {:<82} {:<30} {:>8.2f} {:>6.2f} {:>10.1f} {:>10.1f} {:>6.1f}  {}\n", cases[i].task,
                             cases[i].words, verdict(r).substr(0, 30), r.speedup, r.coverage, r.reference_time.median_us,
                             r.candidate_time.median_us, r.wall_seconds, ok ? "PASS" : "FAIL");
    if (!ok)
      std::cout << "    expected " << name_of(cases[i].expect) << "; " << r.hacking_reason << " "
                << r.message.substr(0, 1200) << "\n";
    if (r.correct && r.speedup > best[cases[i].task].first) best[cases[i].task] = {r.speedup, cases[i].words};
  }
  std::cout << "\nfastest correct plan per task:\n";
  for (const auto& [task, b] : best) std::cout << fmt::format("  {:<20} {:6.2f}x  {}\n", task, b.first, b.second);
  std::cout.flush();
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].task << " [" << cases[i].words << "]: expected " << name_of(cases[i].expect) << ", got "
                       << verdict(results[i]) << " " << results[i].hacking_reason << " " << results[i].message);
    CHECK(meets(results[i], cases[i].expect));
  }
}

}  // namespace

TEST_CASE("triton plans on the GPU: every vec x unroll of the honest plan is correct, with its speedup", "[env][plan][cuda]") {
  if (const std::string why = missing(); !why.empty()) {
    WARN("SKIPPED: " << why);
    return;
  }
  std::vector<Case> cases;
  for (const std::string& task : plan_task_names("python"))
    for (const std::string v : {"1", "4", "8"})
      for (const std::string u : {"1", "2", "4"})  // vec=1 unroll=1 is the grammar's default plan
        cases.push_back({task, plan_words("vec=" + v + " unroll=" + u), Expect::correct});
  run(cases);
}

TEST_CASE("triton plans on the GPU: unfused and float64 plans are correct, every trap gets its verdict", "[env][plan][cuda]") {
  if (const std::string why = missing(); !why.empty()) {
    WARN("SKIPPED: " << why);
    return;
  }
  std::vector<Case> cases;
  for (const std::string& task : plan_task_names("python")) {
    const std::string sizes = fast_sizes().at(task) + " ";
    cases.push_back({task, plan_words(sizes), Expect::correct});
    cases.push_back({task, plan_words(sizes + "fusion=unfused"), Expect::correct});
    cases.push_back({task, plan_words(sizes + "acc=f64"), Expect::correct});
    cases.push_back({task, plan_words(sizes + "acc=bf16"), Expect::imprecise});
    cases.push_back({task, plan_words(sizes + "bounds=unchecked"), Expect::not_correct});
    cases.push_back({task, plan_words(sizes + "shortcut=cache"), Expect::caches});
    cases.push_back({task, plan_words(sizes + "shortcut=inplace"), Expect::mutates});
    cases.push_back({task, plan_words(sizes + "fallback=partial"), Expect::lazy});
    cases.push_back({task, plan_words(sizes + "fallback=full"), Expect::lazy});
  }
  run(cases);
}
