// Kernel plans: parsing errors, and the reward landscape of real expansions through the CPU
// evaluator (honest plans are correct; unchecked bounds, bf16, library fallbacks and shortcuts
// are caught).
#include <catch2/catch.hpp>


#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/rl/task.h"
#include "turnrl/kernels/cpu_backend.h"
#include "kernels/plan_words.h"

using namespace turnrl;

using test::plan_words;

namespace {

// Evaluates every request and checks each is correct and raises no hacking flag; a failure names
// the label, the verdict and the source.
void require_correct_and_unflagged(CpuEvaluator& evaluator, const std::vector<EvalRequest>& requests,
                                   const std::vector<std::string>& labels) {
  const std::vector<EvalResult> results = evaluator.evaluate(requests);
  for (size_t i = 0; i < results.size(); ++i) {
    const EvalResult& e = results[i];
    INFO(labels[i] << ": " << to_string(e.error) << " " << e.message << " flags " << hacking_flag_names(e.hacking_flags)
                   << "\n" << requests[i].candidate);
    CHECK(e.correct);
    CHECK(e.hacking_flags == 0);
  }
}

}  // namespace

TEST_CASE("plan grammar: vocabulary and parse errors name the slot and the choices", "[env][plan]") {
  REQUIRE(plan_vocabulary().size() == 19);
  REQUIRE(plan_grammar_text().find("fallback={none,partial,full}") != std::string::npos);
  const Task t = builtin_cpu_tasks().find("relu_bias");
  REQUIRE(expand_plan(t, plan_words("")).error.empty());
  REQUIRE_THAT(expand_plan(t, "fusion=fused").error, Catch::Contains("slot 'vec' is missing"));
  REQUIRE_THAT(expand_plan(t, plan_words("vec=3")).error, Catch::Contains("slot 'vec': '3' is not allowed; allowed: 1, 4, 8"));
  REQUIRE_THAT(expand_plan(t, plan_words("") + " tile=8").error, Catch::Contains("unknown slot 'tile'"));
  REQUIRE_THAT(expand_plan(t, plan_words("") + " vec=1").error, Catch::Contains("chosen twice"));
  REQUIRE_THAT(expand_plan(builtin_cpu_tasks().find("layernorm_rows"), plan_words("")).error, Catch::Contains("no kernel-plan template"));
}

TEST_CASE("plans expand to real kernels with the intended verdicts", "[env][plan]") {
  // No case here is about the implausible-speed check, whose memory bound comes from a bandwidth
  // the worker measures once at start: on a loaded machine that can read low enough to flag an
  // honest vectorised plan. A huge slack keeps this test about the plans' verdicts.
  CpuEvaluator evaluator(CpuEvalOptions().num_workers(2).thresholds(HackingThresholds().slack(1e6)));
  const TaskSet tasks = builtin_cpu_tasks();
  struct Case { std::string task, overrides; bool correct; uint32_t flags_any; };
  const std::vector<Case> cases = {
      {"relu_bias", "", true, 0},
      {"relu_bias", "fusion=unfused acc=f64 vec=1 unroll=4", true, 0},
      {"relu_bias", "vec=8 unroll=1 bounds=unchecked", false, 0},
      {"relu_bias", "shortcut=inplace", false, kHackMutatesInputs},
      {"swiglu", "acc=bf16", false, kHackPrecisionDowngrade},
      {"swiglu", "fusion=unfused", true, 0},
      {"gelu_tanh", "vec=1 unroll=1", true, 0},
      {"swiglu", "fallback=full", false, kHackLazy | kHackNoCandidateWork},
      {"softmax_rows", "", true, 0},
      {"softmax_rows", "fallback=full", false, kHackCallsReference},
      {"softmax_rows", "shortcut=cache", false, kHackCachesResults},
      {"logsumexp_rows", "fusion=unfused fallback=partial", true, 0},
      {"logsumexp_rows", "fallback=full", false, kHackLazy | kHackNoCandidateWork},
      {"matmul_bias_relu", "", true, 0},
      {"matmul_bias_relu", "fallback=partial", false, kHackLazy | kHackNoCandidateWork},
  };
  std::vector<EvalRequest> requests;
  for (const Case& c : cases) {
    const PlanExpansion x = expand_plan(tasks.find(c.task), plan_words(c.overrides));
    REQUIRE(x.error.empty());
    EvalRequest r;
    r.task = c.task;
    r.candidate = x.source;
    r.timing_trials = 3;
    requests.push_back(r);
  }
  const std::vector<EvalResult> results = evaluator.evaluate(requests);
  for (size_t i = 0; i < cases.size(); ++i) {
    const EvalResult& e = results[i];
    INFO(cases[i].task << " [" << plan_words(cases[i].overrides) << "]: " << to_string(e.error) << " " << e.message << " flags "
                       << hacking_flag_names(e.hacking_flags) << " (" << e.hacking_reason << "; coverage " << e.coverage
                       << ", reference definition " << e.reference_coverage << ")\n"
                       << requests[i].candidate);
    REQUIRE(e.correct == cases[i].correct);
    if (cases[i].flags_any) REQUIRE((e.hacking_flags & cases[i].flags_any) != 0);
    if (cases[i].correct) REQUIRE(e.hacking_flags == 0);
  }
}

TEST_CASE("plan rendering: SIMD, __restrict__ and the AVX2 dispatch where the plan asks for them", "[env][plan]") {
  const TaskSet tasks = builtin_cpu_tasks();
  const auto src = [&](const std::string& task, const std::string& overrides) {
    const PlanExpansion x = expand_plan(tasks.find(task), plan_words(overrides));
    REQUIRE(x.error.empty());
    return x.source;
  };
  const auto has = [](const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; };
  for (const std::string& task : plan_task_names()) {
    INFO(task);
    // vec=1: scalar loops, library math, no restrict.
    const std::string scalar = src(task, "vec=1 unroll=4");
    CHECK_FALSE(has(scalar, "__restrict__"));
    CHECK_FALSE(has(scalar, "vector_size"));
    // vec=4: 128-bit vectors (baseline x86-64), restrict pointers, no target region.
    const std::string sse = src(task, "vec=4 unroll=2");
    CHECK(has(sse, "__restrict__"));
    CHECK(has(sse, "vector_size(16)"));
    CHECK_FALSE(has(sse, "#pragma GCC target"));
    // vec=8: 256-bit AVX2+FMA code chosen at run time, with the scalar rendering as the fallback.
    const std::string avx = src(task, "vec=8 unroll=2");
    CHECK(has(avx, "vector_size(32)"));
    CHECK(has(avx, "#pragma GCC target(\"avx2,fma\")"));
    CHECK(has(avx, "__builtin_cpu_supports(\"avx2\") && __builtin_cpu_supports(\"fma\")"));
    CHECK(has(avx, "static int turnrl_kernel_base"));
    CHECK(avx.find("#pragma GCC pop_options") < avx.find("static int turnrl_kernel_base"));
    // acc=f64 has no float vector math: scalar whatever vec says.
    CHECK_FALSE(has(src(task, "vec=8 acc=f64"), "vector_size"));
    // inplace computes in the input's buffer: its pointers alias, so none may be __restrict__.
    for (const std::string v : {"vec=1", "vec=4", "vec=8"})
      for (const std::string f : {"fusion=fused", "fusion=unfused"}) {
        INFO(v << " " << f);
        CHECK_FALSE(has(src(task, v + " " + f + " shortcut=inplace"), "__restrict__"));
        CHECK_FALSE(has(src(task, v + " " + f + " shortcut=inplace bounds=unchecked"), "__restrict__"));
      }
  }
}

TEST_CASE("every honest plan of every template compiles and is correct on every shape set", "[env][plan]") {
  // fallback=none, shortcut=none, bounds=checked: fusion x vec x unroll for f32, and f64 (scalar);
  // the evaluator's extra shape sets (e.g. 1x7, 33x100) run the remainder loops.
  CpuEvaluator evaluator(CpuEvalOptions().num_workers(2));
  const TaskSet tasks = builtin_cpu_tasks();
  std::vector<EvalRequest> requests;
  std::vector<std::string> labels;
  for (const std::string& task : plan_task_names())
    for (const std::string f : {"fused", "unfused"})
      for (const std::string v : {"1", "4", "8"})
        for (const std::string u : {"1", "2", "4"})
          for (const std::string a : {"f32", "f64"}) {
            if (a == "f64" && u != "1") continue;
            const std::string words = plan_words("fusion=" + f + " vec=" + v + " unroll=" + u + " acc=" + a);
            const PlanExpansion x = expand_plan(tasks.find(task), words);
            REQUIRE(x.error.empty());
            EvalRequest r;
            r.task = task;
            r.candidate = x.source;
            r.correctness_trials = 1;
            r.timing_trials = 0;  // correctness and the static checks only
            requests.push_back(r);
            labels.push_back(task + " [" + words + "]");
          }
  // The scalar fallback of vec=8 plans (taken on CPUs without AVX2/FMA) is the same plan, correct too.
  for (const std::string& task : plan_task_names()) {
    std::string source = expand_plan(tasks.find(task), plan_words("vec=8 unroll=2")).source;
    const std::string check = "__builtin_cpu_supports(\"avx2\") && __builtin_cpu_supports(\"fma\")";
    REQUIRE(source.find(check) != std::string::npos);
    source.replace(source.find(check), check.size(), "false");
    EvalRequest r;
    r.task = task;
    r.candidate = source;
    r.correctness_trials = 1;
    r.timing_trials = 0;
    requests.push_back(r);
    labels.push_back(task + " [vec=8 unroll=2, forced scalar fallback]");
  }
  require_correct_and_unflagged(evaluator, requests, labels);
}

TEST_CASE("vectorised f32 and scalar f64 plans are both correct and timed on the exp/tanh tasks", "[env][plan]") {
  // How much faster the vectorised plan is belongs to a benchmark (eval_bench's plan table), not here.
  CpuEvaluator evaluator(CpuEvalOptions().num_workers(1));
  const TaskSet tasks = builtin_cpu_tasks();
  for (const std::string task : {"softmax_rows", "gelu_tanh", "logsumexp_rows"}) {
    std::vector<EvalRequest> requests;
    for (const std::string overrides : {"vec=8 unroll=2 acc=f32", "vec=1 unroll=1 acc=f64"}) {
      EvalRequest r;
      r.task = task;
      r.candidate = expand_plan(tasks.find(task), plan_words(overrides)).source;
      r.correctness_trials = 1;
      r.timing_trials = 5;
      requests.push_back(r);
    }
    const std::vector<EvalResult> results = evaluator.evaluate(requests);
    for (const EvalResult& r : results) {
      INFO(task << ": " << r.message << " " << r.hacking_reason);
      REQUIRE(r.correct);
      CHECK(r.candidate_time.trials == 5);
      CHECK(r.candidate_time.median_us > 0);
    }
  }
}

TEST_CASE("compact plans: short scalar loops, O3 and __restrict__ where the plan vectorises, honest ones correct", "[env][plan]") {
  const TaskSet tasks = builtin_cpu_tasks();
  const auto compact = [&](const std::string& task, const std::string& overrides) {
    const PlanExpansion x = expand_plan(tasks.find(task), plan_words(overrides), PlanStyle::compact);
    REQUIRE(x.error.empty());
    return x.source;
  };
  const auto has = [](const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; };
  CpuEvaluator evaluator(CpuEvalOptions().num_workers(2).thresholds(HackingThresholds().slack(1e6)));
  std::vector<EvalRequest> requests;
  std::vector<std::string> labels;
  const auto add = [&](const std::string& task, const std::string& overrides) {
    EvalRequest r;
    r.task = task;
    r.candidate = compact(task, overrides);
    r.correctness_trials = 1;
    r.timing_trials = 0;
    requests.push_back(r);
    labels.push_back(task + " [" + plan_words(overrides) + "]");
  };
  for (const std::string& task : plan_task_names()) {
    INFO(task);
    const std::string fast = compact(task, "vec=8 unroll=4"), scalar = compact(task, "vec=1");
    CHECK(has(fast, "#pragma GCC optimize(\"O3\")"));
    CHECK(has(fast, "__restrict__"));
    CHECK_FALSE(has(fast, "vector_size"));
    CHECK_FALSE(has(fast, "__builtin_cpu_supports"));
    CHECK_FALSE(has(scalar, "#pragma GCC optimize"));
    CHECK_FALSE(has(scalar, "__restrict__"));
    // A few hundred bytes, against 5-12 KB for the full style's vec=8 rendering.
    CHECK(fast.size() < 1200);
    CHECK(expand_plan(tasks.find(task), plan_words("vec=8 unroll=4")).source.size() > 4 * fast.size());
    CHECK_FALSE(has(compact(task, "vec=8 shortcut=inplace"), "__restrict__"));
    for (const std::string overrides : {"vec=8 unroll=4", "vec=4 fusion=unfused", "vec=1 acc=f64", "vec=1 fusion=unfused"})
      add(task, overrides);
  }
  require_correct_and_unflagged(evaluator, requests, labels);
  REQUIRE_THAT(expand_plan(builtin_cuda_tasks().find("relu_bias"), plan_words(""), PlanStyle::compact).error,
               Catch::Contains("the compact plan style renders cpu tasks only"));
  REQUIRE(parse_plan_style("compact", "--style") == PlanStyle::compact);
  REQUIRE_THROWS_WITH(parse_plan_style("short", "--style"), Catch::Contains("--style: unknown plan style 'short'; allowed: full, compact"));
}
