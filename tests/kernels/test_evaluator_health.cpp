// Evaluator health: the start-up probe through a real CPU evaluator, working and without a usable
// TMPDIR, and the per-step rule that a batch of only internal errors is a run error.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "candidates.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/cpu_backend.h"
#include "turnrl/kernels/evaluator_health.h"
#include "turnrl/kernels/sandbox.h"

using namespace turnrl;

namespace {

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

EvalResult with_error(EvalError error, const std::string& message = "") {
  EvalResult r;
  r.error = error;
  r.message = message;
  return r;
}

}  // namespace

TEST_CASE("the start-up probe passes a working CPU evaluator and stops one whose TMPDIR is gone", "[eval][health]") {
  const std::string cache = make_private_dir("turnrl-test-health");
  REQUIRE_FALSE(cache.empty());
  CpuEvalOptions o = test::test_options();
  o.workers = 1;
  o.cache_dir = cache + "/working";
  {
    CpuEvaluator working(o);
    const std::vector<EvalResult> r = working.evaluate({EvalRequest{"relu_bias", kProbeCandidate, 1, 1, 1}});
    REQUIRE(r.size() == 1);
    INFO(r[0].message);
    CHECK(r[0].error != EvalError::internal);  // the candidate's fault: it defines nothing
    CHECK(r[0].error != EvalError::none);
    CHECK_NOTHROW(probe_evaluator(working, "relu_bias"));
  }
  o.cache_dir = cache + "/broken";  // a cache of its own: the probe must really compile
  ScopedEnv no_tmp("TMPDIR", cache + "/no-such-directory");
  CpuEvaluator broken(o);
  CHECK_THROWS_WITH(probe_evaluator(broken, "relu_bias"),
                    Catch::Contains("evaluator start-up check on task 'relu_bias'") && Catch::Contains("cannot evaluate"));
  remove_private_dir(cache);
}

TEST_CASE("a batch fails the run only when every result is the evaluator's own internal error", "[eval][health][edge]") {
  CHECK_NOTHROW(require_evaluator_worked({}, "step 1"));
  CHECK_NOTHROW(require_evaluator_worked({with_error(EvalError::compile), with_error(EvalError::crash)}, "step 1"));
  // One working evaluation among internal errors: a flaky worker, not a broken evaluator.
  CHECK_NOTHROW(require_evaluator_worked({with_error(EvalError::internal), with_error(EvalError::none)}, "step 1"));
  CHECK_THROWS_WITH(require_evaluator_worked({with_error(EvalError::internal, "cannot create a compile directory"),
                                              with_error(EvalError::internal, "other")},
                                             "step 7"),
                    Catch::StartsWith("step 7: all 2 evaluations failed inside the evaluator") &&
                        Catch::EndsWith("first: cannot create a compile directory"));
}
