// KernelEnv: candidate extraction, feedback rendering (golden transcript), early stop, max turns,
// and batches of episodes through the real CPU evaluator pool.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <deque>
#include <fstream>
#include <sstream>

#include "turnrl/core/error.h"
#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/kernels/kernel_env.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/kernels/cpu_backend.h"

using namespace turnrl;

namespace {

// Replays fixed verdicts, so that the transcript (with its timings) is reproducible. The real
// evaluator is exercised by the batch tests below.
class ScriptedEvaluator : public KernelEvaluator {
 public:
  explicit ScriptedEvaluator(std::deque<EvalResult> script) : script_(std::move(script)) {}
  std::vector<EvalResult> evaluate(const std::vector<EvalRequest>& requests) override {
    std::vector<EvalResult> out;
    for (const EvalRequest& r : requests) {
      seen.push_back(r);
      out.push_back(script_.front());
      script_.pop_front();
    }
    return out;
  }
  std::vector<EvalRequest> seen;

 private:
  std::deque<EvalResult> script_;
};

Task relu_task() { return builtin_cpu_tasks().find("relu_bias"); }

std::string code_answer(const std::string& code) { return "Here is my kernel.\n```cpp\n" + code + "\n```\n"; }

EvalResult compile_error() {
  EvalResult e;
  e.stage = EvalStage::extracted;
  e.error = EvalError::compile;
  e.message = "candidate.cpp:3:5: error: 'y' was not declared in this scope";
  return e;
}
EvalResult mismatch() {
  EvalResult e;
  e.stage = EvalStage::ran;
  e.error = EvalError::mismatch;
  e.message = "values differ beyond atol=0.01, rtol=0.01";
  e.failing_index = 517;
  e.max_abs_error = 1.25;
  e.max_rel_error = 0.5;
  return e;
}
EvalResult correct(double speedup, double coverage) {
  EvalResult e;
  e.stage = EvalStage::profiled;
  e.correct = true;
  e.speedup = speedup;
  e.coverage = coverage;
  e.reference_time = {120.0, 118.0, 2.0, 20};
  e.candidate_time = {120.0 / speedup, 60.0, 1.0, 20};
  e.profile = {{"turnrl_kernel (own code)", 1500.0, 20, true}, {"lib.add_bias_rows", 500.0, 20, false}};
  return e;
}

std::string transcript(const Observation& o) {
  std::string out;
  for (const ChatMessage& m : o.messages) out += "<<" + m.role + ">>\n" + m.text + "\n";
  return out;
}

}  // namespace

TEST_CASE("extract_candidate takes the last fenced block and checks its tag", "[env][extract]") {
  const auto ok = extract_candidate("text\n```cpp\nint a;\n```\nmore\n```cpp\nint b;\n```\n", {"cpp"});
  REQUIRE(ok.ok);
  REQUIRE(ok.code == "int b;\n");
  REQUIRE_FALSE(extract_candidate("no code here", {"cpp"}).ok);
  REQUIRE_THAT(extract_candidate("no code here", {"cpp"}).error, Catch::Contains("no fenced code block"));
  REQUIRE_THAT(extract_candidate("```python\nx = 1\n```", {"cpp"}).error, Catch::Contains("tagged 'python'; expected ```cpp"));
  REQUIRE_THAT(extract_candidate("```\nint a;\n```", {"cpp"}).error, Catch::Contains("no language tag"));
  REQUIRE_THAT(extract_candidate("```cpp\n\n```", {"cpp"}).error, Catch::Contains("empty"));
  REQUIRE_FALSE(extract_candidate("```cpp\nint a; // never closed", {"cpp"}).ok);
}

TEST_CASE("an episode's transcript for fixed actions matches the golden file", "[env][golden]") {
  auto evaluator = std::make_shared<ScriptedEvaluator>(std::deque<EvalResult>{compile_error(), mismatch(), correct(1.8, 0.62)});
  KernelEnv env(evaluator, KernelRewardPolicy{}, KernelEnvOptions().with_max_turns(4));
  Observation o = env.reset(relu_task());
  const std::vector<std::string> actions = {"I will think first. No code yet.", code_answer("int broken() { return y; }"),
                                            code_answer("// wrong kernel"), code_answer("// right kernel")};
  std::vector<double> rewards;
  for (const std::string& a : actions) {
    const StepResult r = env.step({a});
    rewards.push_back(r.reward);
    o = r.observation;
  }
  REQUIRE(env.done());
  REQUIRE(rewards.size() == 4);
  REQUIRE(rewards[0] == 0.0);  // format, compile and mismatch all score the recipe's penalty, 0
  REQUIRE(rewards[1] == 0.0);
  REQUIRE(rewards[2] == 0.0);
  REQUIRE(rewards[3] == Approx(1.71));  // the recipe's worked example: s = 1.8, coverage 0.62
  REQUIRE(evaluator->seen.size() == 3);  // the format error never reaches the evaluator
  REQUIRE(evaluator->seen[0].task == "relu_bias");
  REQUIRE(evaluator->seen[0].candidate == "int broken() { return y; }\n");

  const std::string got = transcript(o);
  const std::string path = std::string(TURNRL_TEST_DATA_DIR) + "/env/golden_transcript.txt";
  if (std::getenv("TURNRL_UPDATE_GOLDEN")) std::ofstream(path) << got;
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream want;
  want << in.rdbuf();
  REQUIRE(got == want.str());
}

TEST_CASE("episodes stop early on the target speedup, at max turns, and refuse steps after", "[env]") {
  SECTION("target met on turn 2") {
    auto ev = std::make_shared<ScriptedEvaluator>(std::deque<EvalResult>{correct(1.1, 0.9), correct(2.5, 0.9)});
    KernelEnv env(ev, KernelRewardPolicy{}, KernelEnvOptions().with_max_turns(3).with_target_speedup(2.0));
    env.reset(relu_task());
    REQUIRE_FALSE(env.step({code_answer("a")}).done);
    const StepResult r = env.step({code_answer("b")});
    REQUIRE(r.done);
    REQUIRE(r.info.at("target_met") == 1.0);
    REQUIRE_THROWS_WITH(env.step({code_answer("c")}), Catch::Contains("the episode is over"));
  }
  SECTION("max turns") {
    auto ev = std::make_shared<ScriptedEvaluator>(std::deque<EvalResult>{mismatch(), mismatch()});
    KernelEnv env(ev, KernelRewardPolicy{}, KernelEnvOptions().with_max_turns(2));
    env.reset(relu_task());
    REQUIRE_FALSE(env.step({code_answer("a")}).done);
    REQUIRE(env.step({code_answer("b")}).done);
    REQUIRE(env.history().size() == 2);
  }
  SECTION("every feedback kind is rendered") {
    EvalResult hack = correct(3.0, 0.0);
    hack.hacking_flags = kHackCachesResults | kHackLazy;
    hack.hacking_reason = "outputs reused across calls";
    EvalResult timeout;
    timeout.stage = EvalStage::loaded;
    timeout.error = EvalError::timeout;
    timeout.message = "wall-clock limit of 20 s exceeded";
    const KernelRewardPolicy policy;
    REQUIRE_THAT(render_feedback(hack, policy.score(hack), 500), Catch::Contains("reward hacking") && Catch::Contains("lazy, caches_results"));
    REQUIRE_THAT(render_feedback(timeout, policy.score(timeout), 500), Catch::Contains("time limit exceeded"));
    REQUIRE_THAT(render_feedback(mismatch(), policy.score(mismatch()), 500), Catch::Contains("flat index 517"));
    REQUIRE_THAT(render_feedback(correct(1.8, 0.62), policy.score(correct(1.8, 0.62)), 500),
                 Catch::Contains("speedup: 1.80x") && Catch::Contains("62% of the time in your own code"));
    EvalResult long_error = compile_error();
    long_error.message = std::string(5000, 'x');
    REQUIRE(render_feedback(long_error, policy.score(long_error), 300).size() < 600);
  }
}

namespace {

// Forwards to another evaluator and counts the evaluate() calls (a pool step must make one).
class CountingEvaluator : public KernelEvaluator {
 public:
  explicit CountingEvaluator(std::shared_ptr<KernelEvaluator> inner) : inner_(std::move(inner)) {}
  std::vector<EvalResult> evaluate(const std::vector<EvalRequest>& requests) override {
    ++calls;
    return inner_->evaluate(requests);
  }
  int calls = 0;

 private:
  std::shared_ptr<KernelEvaluator> inner_;
};

}  // namespace

TEST_CASE("a pool of 64 episodes steps through the real CPU evaluator in one call, results in order", "[env][batch]") {
  auto evaluator = std::make_shared<CountingEvaluator>(std::make_shared<CpuEvaluator>(CpuEvalOptions().num_workers(2)));
  const KernelEnvOptions options = KernelEnvOptions().with_max_turns(2).with_action(ActionFormat::plan).with_timing_trials(3);
  const Task task = relu_task();
  std::unique_ptr<EnvironmentPool> pool = kernel_env_pools(evaluator, KernelRewardPolicy{}, options)(64);
  REQUIRE(pool->size() == 64);
  std::vector<size_t> episodes;
  std::vector<Action> actions;
  const std::string honest = "fusion=fused vec=4 unroll=2 acc=f32 fallback=none bounds=checked shortcut=none";
  const std::string unchecked = "fusion=fused vec=8 unroll=1 acc=f32 fallback=none bounds=unchecked shortcut=none";
  for (size_t i = 0; i < 64; ++i) {
    pool->reset(i, task);
    episodes.push_back(i);
    actions.push_back({i % 4 == 3 ? "not a plan" : i % 2 ? unchecked : honest});
  }
  const std::vector<StepResult> results = pool->step(episodes, actions);
  CHECK(evaluator->calls == 1);
  REQUIRE(results.size() == 64);
  for (size_t i = 0; i < 64; ++i) {
    INFO("episode " << i << ": " << results[i].feedback);
    const EvalResult& e = kernel_verdict(results[i].payload.get()).eval;
    if (i % 4 == 3) {
      REQUIRE(e.error == EvalError::format);
    } else if (i % 2) {
      REQUIRE_FALSE(e.correct);  // passes the shown shape, not the others
    } else {
      REQUIRE(e.correct);
      REQUIRE(results[i].reward > 0.5);
    }
    REQUIRE_FALSE(results[i].done);
  }
  // The payload crosses ranks as bytes and comes back equal.
  const KernelVerdict& first = kernel_verdict(results[0].payload.get());
  const auto decoded = kernel_verdict_decoder(KernelRewardPolicy{})(first.serialize());
  CHECK(kernel_verdict(decoded.get()).eval.speedup == first.eval.speedup);
  CHECK(kernel_verdict(decoded.get()).reward.reward == first.reward.reward);
  CHECK_THROWS_WITH(pool->step({0, 0}, {actions[0], actions[0]}), Catch::Contains("listed twice"));
  CHECK_THROWS_WITH(pool->step({64}, {actions[0]}), Catch::Contains("out of range"));
}

TEST_CASE("feedback is valid UTF-8 when the trimmed compiler log cuts a character or quotes stray bytes", "[env]") {
  // U+FFFD (EF BF BD) is what a lossy decode of the policy's tokens leaves for stray bytes; the
  // compiler quotes it back, and trimming to 64 bytes cuts the one at offset 41 after its first byte.
  EvalResult e;
  e.error = EvalError::compile;
  e.message = std::string(41, 'a') + "\xEF\xBF\xBD" + std::string(200, 'b') + "\xC3";
  KernelReward reward;
  const std::string feedback = render_feedback(e, reward, 64);
  INFO(feedback);
  CHECK(feedback.find("compilation failed") != std::string::npos);
  // Each cut or stray sequence became one U+FFFD; nothing else changed.
  CHECK(feedback.find(std::string(41, 'a') + "\xEF\xBF\xBD\n... [") != std::string::npos);
  CHECK(feedback.find(std::string(20, 'b') + "\xEF\xBF\xBD\n") != std::string::npos);
  for (size_t i = 0; i < feedback.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(feedback[i]);
    if (c < 0x80) continue;
    // Only U+FFFD is outside ASCII here.
    REQUIRE(feedback.compare(i, 3, "\xEF\xBF\xBD") == 0);
    i += 2;
  }
}
