// Kernel plans on a real GPU through the CUDA evaluator (src/kernels/cuda_plan.cpp): for every CUDA
// task, honest plans (the default, the fast one and a few more) are correct, bf16 is caught by the
// precision check (or fails the comparison), unchecked bounds fail the odd shapes, the cache and
// in-place shortcuts are flagged, and fallback=full is lazy. Prints each plan's speedup over the
// LibTorch reference. Skips (and says so) without a GPU.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "kernels/plan_words.h"
#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/rl/task.h"
#include "turnrl/kernels/cuda_backend.h"

using namespace turnrl;
using test::plan_words;

namespace {

bool have_gpu() {
  if (visible_cuda_devices() > 0) return true;
  WARN("SKIPPED: no GPU visible to this process");
  return false;
}

struct Case {
  std::string overrides;  // of plan_words()
  std::string expect;     // correct | imprecise | wrong | caches | mutates | lazy | any
};

bool verdict_matches(const std::string& expect, const EvalResult& r) {
  if (expect == "correct") return r.correct && !r.hacked() && r.stage == EvalStage::profiled && r.speedup > 0;
  if (expect == "imprecise")
    return (r.hacking_flags & kHackPrecisionDowngrade) != 0 || r.error == EvalError::mismatch || r.error == EvalError::nonfinite;
  if (expect == "wrong") return !r.correct;
  if (expect == "caches") return (r.hacking_flags & kHackCachesResults) != 0;
  if (expect == "mutates") return (r.hacking_flags & kHackMutatesInputs) != 0;
  if (expect == "lazy") return (r.hacking_flags & (kHackLazy | kHackNoCandidateWork)) != 0;
  return true;
}

}  // namespace

TEST_CASE("cuda plans on the GPU: honest plans are correct, the traps are caught", "[cuda]") {
  if (!have_gpu()) return;
  const std::vector<Case> cases = {
      {"vec=1 unroll=1", "correct"},  // the grammar's default plan
      {"", "correct"},                // fused vec=4 unroll=2 f32 none checked none
      {"vec=4 unroll=4", "correct"},
      {"vec=8 unroll=4", "correct"},
      {"fusion=unfused", "correct"},
      {"acc=f64", "correct"},
      {"acc=bf16", "imprecise"},
      {"bounds=unchecked", "wrong"},
      {"shortcut=cache", "caches"},
      {"shortcut=inplace", "mutates"},
      {"fallback=partial", "any"},  // lazy unless the plan's own kernel is slow: reported only
      {"fallback=full", "lazy"},
  };
  const TaskSet tasks = builtin_cuda_tasks();
  std::vector<EvalRequest> requests;
  std::vector<std::pair<std::string, const Case*>> labels;
  for (const std::string& task : plan_task_names("cuda"))
    for (const Case& c : cases) {
      const PlanExpansion x = expand_plan(tasks.find(task), plan_words(c.overrides));
      REQUIRE(x.error.empty());
      EvalRequest r;
      r.task = task;
      r.candidate = x.source;
      r.correctness_trials = 2;
      r.timing_trials = 20;
      r.seed = 0;
      requests.push_back(r);
      labels.push_back({task, &c});
    }
  // Four workers share the GPU: verdicts do not depend on exclusive timing, and the launcher
  // forms' nvcc compiles run in parallel.
  CudaEvaluator evaluator([] {
    CudaEvalOptions o;
    o.workers_per_device = 4;
    return o;
  }());
  const std::vector<EvalResult> results = evaluator.evaluate(requests);
  REQUIRE(results.size() == requests.size());
  fmt::print("{:<17} {:<34} {:<9} {:>8} {:>8}  {}\n", "task", "plan (changed slots)", "expect", "speedup", "coverage", "verdict");
  for (size_t i = 0; i < results.size(); ++i) {
    const EvalResult& r = results[i];
    const auto& [task, c] = labels[i];
    const std::string verdict = fmt::format("{}{}{}", to_string(r.stage), r.error == EvalError::none ? "" : " " + std::string(to_string(r.error)),
                                            r.hacking_flags ? " [" + hacking_flag_names(r.hacking_flags) + "]" : "");
    fmt::print("{:<17} {:<34} {:<9} {:>8.2f} {:>8.2f}  {}\n", task, c->overrides.empty() ? "(fast)" : c->overrides, c->expect,
               r.speedup, r.coverage, verdict);
    INFO(task << " [" << plan_words(c->overrides) << "] expect " << c->expect << ": " << verdict << "\n  " << r.message.substr(0, 600)
              << "\n  " << r.hacking_reason);
    CHECK(verdict_matches(c->expect, r));
  }
}
