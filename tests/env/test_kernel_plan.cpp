// Kernel plans: parsing errors, and the reward landscape of real expansions through the CPU
// evaluator (honest plans are correct; unchecked bounds, bf16, library fallbacks and shortcuts
// are caught).
#include <catch2/catch.hpp>

#include <map>
#include <sstream>

#include "turnrl/env/kernel_plan.h"
#include "turnrl/env/task.h"
#include "turnrl/eval/cpu_backend.h"

using namespace turnrl;

namespace {
std::string plan(const std::string& overrides) {
  // Defaults first; a later word for the same slot replaces the earlier one.
  std::map<std::string, std::string> slots = {{"fusion", "fused"}, {"vec", "4"},         {"unroll", "2"},
                                              {"acc", "f32"},      {"fallback", "none"}, {"bounds", "checked"},
                                              {"shortcut", "none"}};
  std::istringstream in(overrides);
  for (std::string w; in >> w;) slots[w.substr(0, w.find('='))] = w.substr(w.find('=') + 1);
  std::string out;
  for (const PlanSlot& s : plan_slots()) out += s.name + "=" + slots[s.name] + " ";
  return out;
}
}  // namespace

TEST_CASE("plan grammar: vocabulary and parse errors name the slot and the choices", "[env][plan]") {
  REQUIRE(plan_vocabulary().size() == 19);
  REQUIRE(plan_grammar_text().find("fallback={none,partial,full}") != std::string::npos);
  const Task t = builtin_cpu_tasks().find("relu_bias");
  REQUIRE(expand_plan(t, plan("")).error.empty());
  REQUIRE_THAT(expand_plan(t, "fusion=fused").error, Catch::Contains("slot 'vec' is missing"));
  REQUIRE_THAT(expand_plan(t, plan("vec=3")).error, Catch::Contains("slot 'vec': '3' is not allowed; allowed: 1, 4, 8"));
  REQUIRE_THAT(expand_plan(t, plan("") + " tile=8").error, Catch::Contains("unknown slot 'tile'"));
  REQUIRE_THAT(expand_plan(t, plan("") + " vec=1").error, Catch::Contains("chosen twice"));
  REQUIRE_THAT(expand_plan(builtin_cpu_tasks().find("layernorm_rows"), plan("")).error, Catch::Contains("no kernel-plan template"));
}

TEST_CASE("plans expand to real kernels with the intended verdicts", "[env][plan]") {
  CpuEvaluator evaluator(CpuEvalOptions().num_workers(2));
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
    const PlanExpansion x = expand_plan(tasks.find(c.task), plan(c.overrides));
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
    INFO(cases[i].task << " [" << plan(cases[i].overrides) << "]: " << to_string(e.error) << " " << e.message << " flags "
                       << hacking_flag_names(e.hacking_flags) << "\n" << requests[i].candidate);
    REQUIRE(e.correct == cases[i].correct);
    if (cases[i].flags_any) REQUIRE((e.hacking_flags & cases[i].flags_any) != 0);
    if (cases[i].correct) REQUIRE(e.hacking_flags == 0);
  }
}
