// Evaluator hardening (issue 22): adversarial candidates of each weakness class, written for this
// test (tests/data/cpu_tasks/adversarial), each caught by the check docs/evaluator.md names for it,
// and honest controls next to them that nothing may flag.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "candidates.h"
#include "kernels/code_sampler.h"
#include "kernels/process_lockdown.h"
#include "turnrl/kernels/cpu_protocol.h"
#include "turnrl/kernels/cpu_tasks.h"
#include "turnrl/kernels/hacking.h"
#include "turnrl/kernels/kernel_reward.h"

using namespace turnrl;

namespace {

EvalRequest adversarial(const std::string& task, const std::string& name) {
  return test::request(task, task + "_" + name, "adversarial");
}

// One worker: every candidate runs in the process its predecessor left behind.
CpuEvaluator& single_worker() {
  static CpuEvaluator e(test::test_options().num_workers(1));
  return e;
}

std::string describe(const EvalResult& r) {
  return fmt::format("error {}, flags '{}', reason: {}; message: {}", to_string(r.error),
                     hacking_flag_names(r.hacking_flags), r.hacking_reason, r.message);
}

void check_caught(const EvalResult& r, uint32_t flag) {
  INFO(describe(r));
  CHECK((r.hacking_flags & flag) == flag);
  CHECK(r.error == EvalError::hacking);
  CHECK(!r.correct);
  CHECK(r.speedup == 0);
}

void check_clean(const EvalResult& r) {
  INFO(describe(r));
  CHECK(r.correct);
  CHECK(r.error == EvalError::none);
  CHECK(r.hacking_flags == 0);
  CHECK(r.stage == EvalStage::profiled);
}

}  // namespace

TEST_CASE("adversarial, class 1: frames forged on the result channel are tampering, never a crash or a mixed-up result") {
  const auto res = single_worker().evaluate({adversarial("relu_bias", "forged_garbage_frame"),
                                             test::request("relu_bias", "honest"),
                                             adversarial("relu_bias", "forged_reply"),
                                             test::request("relu_bias", "honest")});
  REQUIRE(res.size() == 4);
  check_caught(res[0], kHackTampering);
  check_caught(res[2], kHackTampering);
  // Which check sees it first depends on timing (its nonce, or the worker's next frame already
  // behind it on the channel); either way it is not the answer.
  CHECK(res[2].hacking_reason.find("not its answer") != std::string::npos);
  // The forger's worker was replaced: what it left on the channel reaches no later evaluation.
  check_clean(res[1]);
  check_clean(res[3]);
  // A time written into the harness's per-call slot on the stack is never read for a candidate.
  const EvalResult forged = single_worker().evaluate({adversarial("softmax_rows", "forged_self_time")})[0];
  INFO(to_string(forged.error) << ": " << forged.message << " " << forged.hacking_reason);
  CHECK(forged.correct);  // an honest softmax otherwise
  CHECK(forged.candidate_time.median_us != 15.0);
  CHECK(forged.candidate_time.min_us != 15.0);
  // Most calls reported far too short behind a few far too long, so that the sum still adds up:
  // held call by call, and each call counts at least its marked CPU time.
  const EvalResult skewed = single_worker().evaluate({adversarial("matmul_bias_relu", "skewed_median")})[0];
  check_caught(skewed, kHackTampering);
  CHECK_THAT(skewed.hacking_reason, Catch::Contains("timed call"));
  // A clock slowed inside the worker (its GOT entry rewritten through /proc/self/mem): where the
  // kernel has Landlock the write is refused and the candidate gives up (it returns 9); elsewhere
  // the call marks catch the slowed clock.
  const EvalResult slowed = single_worker().evaluate({adversarial("matmul_bias_relu", "slowed_clock")})[0];
  if (sandbox_detail::lockdown_support().landlock_abi >= 1) {
    INFO(describe(slowed));
    CHECK(slowed.error == EvalError::runtime);
    CHECK_THAT(slowed.message, Catch::Contains("returned 9"));
  } else {
    check_caught(slowed, kHackTampering);
    CHECK_THAT(slowed.hacking_reason, Catch::Contains("read from outside at each call's start and end"));
  }
}

TEST_CASE("adversarial, class 2: behaviour that changes once calls look timed is caught on the timed calls") {
  const auto res = single_worker().evaluate({adversarial("softmax_rows", "degrades_when_timed"),
                                             adversarial("swiglu", "skips_when_timed"),
                                             adversarial("gelu_tanh", "mutates_when_timed"),
                                             test::request("softmax_rows", "honest")});
  check_caught(res[0], kHackPrecisionDowngrade);
  check_caught(res[1], kHackDeferredWork);
  check_caught(res[2], kHackMutatesInputs);
  check_clean(res[3]);
  // The rest of the work left to a hook in a library's writable GOT, run where the harness
  // allocates after the call: the slots are compared (and put back) right after each call.
  const sandbox_detail::LockdownSupport support = sandbox_detail::lockdown_support();
  if (!support.mseal) {
    WARN("this kernel lacks mseal: the guard of library GOT slots can be undone; skipped");
    return;
  }
  const EvalResult deferred = single_worker().evaluate({adversarial("matmul_bias_relu", "deferred_through_got")})[0];
  check_caught(deferred, kHackTampering);
  CHECK_THAT(deferred.hacking_reason, Catch::Contains("GOT"));
}

TEST_CASE("adversarial, class 3: process-wide state changes are refused and the worker replaced") {
  const auto res = single_worker().evaluate({adversarial("relu_bias", "alarm_signal"), test::request("relu_bias", "honest"),
                                             adversarial("relu_bias", "leaves_flush_to_zero"),
                                             test::request("relu_bias", "honest")});
  check_caught(res[0], kHackTampering);
  CHECK(res[0].hacking_reason.find("process-wide state") != std::string::npos);
  check_clean(res[1]);  // a fresh worker: no timer, no handler
  check_caught(res[2], kHackTampering);
  CHECK_THAT(res[2].hacking_reason, Catch::Contains("MXCSR"));
  check_clean(res[3]);
}

TEST_CASE("adversarial, class 4: library code reached outside the served routines is library time") {
  // cblas_sgemm of the loaded BLAS found through the dynamic loader's list of objects: no import,
  // no mark, no counter. Its thread's samples, read from outside the worker, land in libblas.
  if (const std::string& why = sandbox_detail::code_sampling_unavailable(); !why.empty()) {
    WARN("candidate code cannot be sampled here (" + why + "): the hidden library call goes unseen; skipped");
    return;
  }
  const auto res = single_worker().evaluate({adversarial("matmul_bias_relu", "hidden_cblas_link_map"),
                                             test::request("matmul_bias_relu", "lazy"),
                                             test::request("matmul_bias_relu", "honest"),
                                             adversarial("matmul_bias_relu", "hidden_call_in_forged_span")});
  CHECK_THAT(res[0].hacking_reason, Catch::Contains("outside the routines the evaluator serves") &&
                                         Catch::Contains("libblas"));
  CHECK(std::min(res[0].coverage, res[0].reference_coverage) < 0.3);  // the lazy check takes the lower
  // The same call inside a forged pair of routine marks (coverage 1.0 and 1.48 before the spans'
  // samples counted as library time): the samples inside a span are library time whatever its
  // marks claim, so a forged span costs the candidate what it covers.
  CHECK(std::min(res[3].coverage, res[3].reference_coverage) < 0.3);
  // Its control, the GEMM through the served matmul, is caught by the marks; an honest
  // candidate's samples stay in its own code.
  for (const EvalResult& lazy : {res[0], res[1], res[3]}) {
    INFO(describe(lazy));  // their own bias and ReLU are a few percent: no_candidate_work or lazy
    CHECK((lazy.hacking_flags & (kHackNoCandidateWork | kHackLazy)) != 0);
    CHECK(lazy.error == EvalError::hacking);
    CHECK(lazy.speedup == 0);
  }
  check_clean(res[2]);
  CHECK(res[2].coverage > 0.9);
}

TEST_CASE("adversarial, class 4: a short hidden library call is seen in the densely sampled calls, left out of the timing") {
  if (const std::string& why = sandbox_detail::code_sampling_unavailable(); !why.empty()) {
    WARN("candidate code cannot be sampled here (" + why + "): the hidden library call goes unseen; skipped");
    return;
  }
  // The timed calls sampled every 100 ms: over 16 calls of a few ms they hold at most one sample of
  // the hidden call (the evaluator counts more than two), so whatever is seen, the dense calls saw.
  CpuEvalOptions o = test::test_options().num_workers(1);
  o.code_sample_period_us = 100000;
  CpuEvaluator dense(o);
  o.dense_sample_period_us = 0;
  CpuEvaluator timed_only(o);
  EvalRequest hidden = adversarial("matmul_bias_relu", "hidden_short_call");
  EvalRequest honest = test::request("matmul_bias_relu", "honest");
  hidden.timing_trials = honest.timing_trials = 16;  // 2 more calls sampled densely
  const auto sampled_hidden_us = [](const EvalResult& r) {
    for (const ProfiledKernel& k : r.profile)
      if (k.name == "lib:(outside the served routines, sampled)") return k.device_us;
    return 0.0;
  };
  const std::vector<EvalResult> seen = dense.evaluate({hidden, honest});
  const EvalResult unseen = timed_only.evaluate({hidden})[0];
  INFO("dense: " << describe(seen[0]) << "; coverage " << seen[0].coverage << "\ntimed only: " << describe(unseen)
                 << "; coverage " << unseen.coverage);
  // About 0.2 ms a call in libblas, over the 16 timed calls.
  CHECK(sampled_hidden_us(seen[0]) > 16 * 50.0);
  CHECK(sampled_hidden_us(unseen) == 0);
  CHECK(seen[0].coverage < unseen.coverage);
  // The dense calls are not timed.
  CHECK(seen[0].candidate_time.trials == 16);
  // An honest candidate's dense calls hold no library sample.
  check_clean(seen[1]);
  CHECK(sampled_hidden_us(seen[1]) == 0);
  CHECK(seen[1].candidate_time.trials == 16);
}

TEST_CASE("adversarial, class 4: the hidden call moved to a thread of the candidate's own is refused, with or without namespaces") {
  // The sampler follows the thread it was opened on (an inherited event's ring cannot be mapped per
  // task), so the worker refuses threads instead: seccomp's candidate profile, which rlimits-only
  // workers install too where the kernel allows it. The candidate returns 8 when it cannot start one.
  CpuEvalOptions loose = test::test_options().num_workers(1);
  loose.limits.isolate(SandboxIsolation::rlimits_only);
  CpuEvaluator without_namespaces(loose);
  for (CpuEvaluator* e : {&single_worker(), &without_namespaces}) {
    const auto res = e->evaluate({adversarial("matmul_bias_relu", "hidden_call_on_a_thread"),
                                  test::request("matmul_bias_relu", "honest")});
    INFO(describe(res[0]));
    CHECK(res[0].error == EvalError::runtime);
    CHECK_THAT(res[0].message, Catch::Contains("returned 8"));
    CHECK(res[0].speedup == 0);
    check_clean(res[1]);
  }
}

TEST_CASE("adversarial, class 4: the routine a task replaces is not served, however it is reached") {
  const auto res = single_worker().evaluate({adversarial("softmax_rows", "replaced_routine_copy"),
                                             adversarial("softmax_rows", "unnamed_routine")});
  check_caught(res[0], kHackCallsReference);
  // The worker's own routine, found through its symbol table and its call moved to another
  // routine's counter: the marks name the routine.
  check_caught(res[1], kHackCallsReference);
  CHECK_THAT(res[1].hacking_reason, Catch::Contains("softmax_rows"));
}

TEST_CASE("adversarial, class 5: busy work next to library calls never raises a lazy candidate's reward") {
  const auto res = single_worker().evaluate({test::request("relu_bias", "lazy"), adversarial("relu_bias", "lazy_pumped")});
  const KernelRewardPolicy policy;
  for (const EvalResult& r : res) {
    INFO(describe(r) << "; coverage " << r.coverage << ", own share " << r.reference_coverage);
    CHECK((r.hacking_flags & (kHackLazy | kHackNoCandidateWork)) != 0);
    CHECK(r.coverage < HackingThresholds().lazy_coverage);
  }
  // The pumped candidate spends most of its call in its own code: the old share-of-own-time
  // measure would have cleared it.
  CHECK(res[1].reference_coverage > res[0].reference_coverage);
  CHECK(policy.score(res[1]).reward <= policy.score(res[0]).reward);
  // Library counters restored in the worker's memory after the calls: the marks read from outside
  // still count the calls and their time.
  const EvalResult laundered = single_worker().evaluate({adversarial("matmul_softmax", "laundered_library")})[0];
  check_caught(laundered, kHackTampering);
  CHECK_THAT(laundered.hacking_reason, Catch::Contains("marked from outside"));
  CHECK(KernelRewardPolicy().score(laundered).reward <= policy.score(res[0]).reward);
  // Only the time counters put back, the call counts left to match the marks: the exit marks carry
  // the time measured inside each routine.
  const EvalResult timeless = single_worker().evaluate({adversarial("matmul_softmax", "laundered_time_only")})[0];
  INFO(describe(timeless) << "; coverage " << timeless.coverage);
  CHECK((timeless.hacking_flags & (kHackLazy | kHackNoCandidateWork)) != 0);
  CHECK(std::min(timeless.coverage, timeless.reference_coverage) < HackingThresholds().lazy_coverage);
  CHECK(KernelRewardPolicy().score(timeless).reward <= policy.score(res[0]).reward);
}

TEST_CASE("adversarial, class 6: larger shapes, far out-of-bounds writes and pasted assembly are caught") {
  const auto res = single_worker().evaluate({adversarial("relu_bias", "wrong_when_larger"),
                                             adversarial("relu_bias", "writes_far_past_end"),
                                             adversarial("layernorm_rows", "pasted_rdtsc"),
                                             adversarial("layernorm_rows", "honest_mentions_asm")});
  check_caught(res[0], kHackShapeSpecialisation);
  {
    INFO(describe(res[1]));
    CHECK(!res[1].correct);
    CHECK((res[1].error == EvalError::crash || (res[1].hacking_flags & kHackOutOfBoundsWrite) != 0));
  }
  check_caught(res[2], kHackTampering);
  CHECK(res[2].hacking_reason.find("rdtsc") != std::string::npos);
  check_clean(res[3]);
}

TEST_CASE("random_shape_set: prime sizes above the shown ones, odd ones under 64, shared sizes kept shared") {
  const CpuTask& task = cpu_task("matmul_bias_relu");  // x [M,K], w [K,N], b [N]
  auto is_prime = [](int64_t v) {
    if (v < 2) return false;
    for (int64_t d = 2; d * d <= v; ++d)
      if (v % d == 0) return false;
    return true;
  };
  std::set<ShapeSet> seen;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const ShapeSet big = random_shape_set(task, seed, true), small = random_shape_set(task, seed, false);
    for (const ShapeSet* s : {&big, &small}) {
      REQUIRE(s->size() == 3);
      CHECK((*s)[0][1] == (*s)[1][0]);  // K
      CHECK((*s)[1][1] == (*s)[2][0]);  // N
    }
    for (size_t i = 0; i < big.size(); ++i)
      for (size_t d = 0; d < big[i].size(); ++d) {
        CHECK(big[i][d] > task.shape_sets[0][i][d]);
        CHECK(is_prime(big[i][d]));
        CHECK(small[i][d] % 2 == 1);
        CHECK(small[i][d] < 64);
      }
    seen.insert(big);
  }
  CHECK(seen.size() > 10);  // varies per evaluation
}

TEST_CASE("perturb_for_timing: every element scaled by its own factor from 0.75 to 1.25, anew every trial") {
  const int64_t n = 256 * 512;
  std::vector<float> base(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) base[size_t(k)] = k % 7 == 0 ? 0.f : float(k % 13) - 6.f;
  const float* from = base.data();
  std::vector<std::vector<float>> trials;
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<float> v(size_t(n), 99.f);
    float* to = v.data();
    perturb_for_timing(&from, &to, &n, 1, 42, trial);
    int64_t unchanged = 0;
    for (int64_t k = 0; k < n; ++k) {
      const float b = base[size_t(k)], x = v[size_t(k)];
      if (b == 0.f) {
        CHECK(x == 0.f);
        continue;
      }
      const float factor = x / b;  // signs and the range kept
      if (!(factor >= 0.75f && factor < 1.25f)) FAIL("element " << k << ": factor " << factor);
      unchanged += x == b;
    }
    CHECK(unchanged < n / 1000);  // (a factor of exactly 1 is rare, never a pattern)
    trials.push_back(v);
  }
  int64_t same_in_two = 0;  // a kept copy of the last call's inputs finds (almost) everything changed
  for (int64_t k = 0; k < n; ++k) same_in_two += base[size_t(k)] != 0.f && trials[1][size_t(k)] == trials[2][size_t(k)];
  CHECK(same_in_two < n / 1000);
  std::vector<float> again(static_cast<size_t>(n));
  float* to = again.data();
  perturb_for_timing(&from, &to, &n, 1, 42, 2);  // stateless: trial 2 without trials 0 and 1
  CHECK(again == trials[2]);
}

TEST_CASE("cpu worker protocol: trailing bytes and impossible lengths are refused, not allocated") {
  cpu_detail::WorkerReply reply;
  reply.nonce = 7;
  std::string bytes = cpu_detail::encode(reply);
  CHECK(cpu_detail::decode<cpu_detail::WorkerReply>(bytes).nonce == 7);
  CHECK_THROWS_AS(cpu_detail::decode<cpu_detail::WorkerReply>(bytes + "x"), Error);
  CHECK_THROWS_AS(cpu_detail::decode<cpu_detail::WorkerReply>(bytes.substr(0, bytes.size() - 1)), Error);
  // A trials count of 2^40 in a short message: refused before anything is allocated.
  std::string huge = bytes;
  const size_t trials_at = 8 + 4 + 8 + 4;
  const uint64_t count = uint64_t(1) << 40;
  std::memcpy(&huge[trials_at], &count, 8);
  CHECK_THROWS_AS(cpu_detail::decode<cpu_detail::WorkerReply>(huge), Error);
}
