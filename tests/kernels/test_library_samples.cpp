// The CPU evaluator's reading of a candidate's sampled code (src/kernels/library_samples.h): whose
// code each mapping is, and the library time the served routines' marks do not account for.
#include <catch2/catch.hpp>

#include "kernels/library_samples.h"

using namespace turnrl;
using namespace turnrl::eval_detail;

namespace {
const std::string kWorker = "/opt/turnrl/libexec/turnrl/turnrl_cpu_worker";
CodeSamples sampled_at(const std::string& mapping, bool since_start, int64_t samples = 1, int call = 0) {
  return {call, mapping, since_start, CodeMatch::unchecked, samples};
}
}  // namespace

TEST_CASE("library samples: the candidate's object and the C runtime loaded at start-up are its own") {
  CHECK(code_owner(sampled_at("/sandbox/candidate-1.so (deleted)", true), kWorker) == CodeOwner::candidate);
  CHECK(code_owner(sampled_at("/tmp/turnrl-worker-7-abc/candidate-12.so (deleted)", true), kWorker) == CodeOwner::candidate);
  for (const char* runtime : {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                              "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
                              "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "[vdso]"}) {
    INFO(runtime);
    CHECK(code_owner(sampled_at(runtime, false), kWorker) == CodeOwner::candidate);
    // A runtime library mapped again after start-up is not the one the worker loaded and sealed.
    CHECK(code_owner(sampled_at(runtime, true), kWorker) == CodeOwner::library);
  }
}

TEST_CASE("library samples: code mapped after start-up is the candidate's when it holds the object's bytes, whatever its name") {
  CodeSamples s = sampled_at("/sandbox/candidate-1.so (deleted)", true);
  s.match = CodeMatch::loaded_object;
  CHECK(code_owner(s, kWorker) == CodeOwner::candidate);
  s.mapping = "/memfd:anything (deleted)";
  CHECK(code_owner(s, kWorker) == CodeOwner::candidate);
  // The object's name over other bytes: a library's file copied into the worker's directory as
  // candidate-<n>.so and mapped, or the object's own file rewritten after it was loaded.
  s.mapping = "/sandbox/candidate-1.so (deleted)";
  s.match = CodeMatch::other;
  CHECK(code_owner(s, kWorker) == CodeOwner::library);
  s.mapping = "/sandbox/candidate-2.so";
  CHECK(code_owner(s, kWorker) == CodeOwner::library);
}

TEST_CASE("library samples: the worker executable is the harness, everything else is library") {
  CHECK(code_owner(sampled_at(kWorker, false), kWorker) == CodeOwner::harness);
  CHECK(code_owner(sampled_at("/other/place/turnrl_cpu_worker", false), kWorker) == CodeOwner::harness);
  for (const char* library : {"/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13", "/usr/lib/libc10.so",
                              "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0", "/usr/lib/x86_64-linux-gnu/libgomp.so.1",
                              "/usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3", "[anon]", "[unknown]"}) {
    INFO(library);
    CHECK(code_owner(sampled_at(library, false), kWorker) == CodeOwner::library);
    CHECK(code_owner(sampled_at(library, true), kWorker) == CodeOwner::library);
  }
  // Code mapped after start-up under a name that is not the candidate's object, or the worker's.
  CHECK(code_owner(sampled_at("/sandbox/candidate.so", true), kWorker) == CodeOwner::library);
  CHECK(code_owner(sampled_at("/sandbox/my-candidate-1.so.bak", true), kWorker) == CodeOwner::library);
  CHECK(code_owner(sampled_at(kWorker, true), kWorker) == CodeOwner::library);
  CHECK(code_owner(sampled_at("[anon]", true), kWorker) == CodeOwner::library);
}

TEST_CASE("library samples: samples are counted by owner, and library ones are library time") {
  const std::vector<CodeSamples> samples = {
      sampled_at("/sandbox/candidate-2.so (deleted)", true, 40, 0), sampled_at("/usr/lib/libm.so.6", false, 10, 0),
      sampled_at(kWorker, false, 3, 0), sampled_at("/usr/lib/blas/libblas.so.3", false, 120, 0),
      sampled_at("/usr/lib/blas/libblas.so.3", false, 80, 1), sampled_at("/usr/lib/libtorch_cpu.so", false, 7, 1),
      sampled_at("[unknown]", true, 2, 1)};
  const SampledCode c = classify_samples(samples, 100e-6, kWorker);
  CHECK(c.candidate == 50);
  CHECK(c.harness == 3);
  CHECK(c.library == 209);
  CHECK(c.library_us == Approx(20900.0));  // 209 x 100 us
  CHECK(c.library_mappings == "libblas.so.3 (200), libtorch_cpu.so (7), [unknown] (2)");
  CHECK(classify_samples({}, 100e-6, kWorker).library_us == 0);
  CHECK(classify_samples(samples, 0, kWorker).library_us == 0);  // not sampled
}

TEST_CASE("library samples: samples inside a served routine's call are the routine's, not hidden library time") {
  CHECK(code_owner(sampled_at(kInsideServedRoutine, false), kWorker) == CodeOwner::served_routine);
  const std::vector<CodeSamples> samples = {sampled_at(kInsideServedRoutine, false, 150, 0),
                                            sampled_at("/sandbox/candidate-3.so (deleted)", true, 30, 0),
                                            sampled_at("/usr/lib/blas/libblas.so.3", false, 4, 0)};
  const SampledCode c = classify_samples(samples, 1e-3, kWorker);
  CHECK(c.served_routine == 150);
  CHECK(c.candidate == 30);
  CHECK(c.library == 4);
  CHECK(c.library_us == Approx(4000.0));  // 4 x 1 ms
  CHECK(c.library_mappings == "libblas.so.3 (4)");
}

TEST_CASE("library samples: hidden library time is every library sample outside the routines, past two") {
  // An honest candidate's thread has none: its own code, the runtime, the harness or a served routine.
  CHECK(hidden_library_us(0, 1000) == 0);
  // One or two are tolerated (a mark's clock read at an edge of a routine's call).
  CHECK(hidden_library_us(1, 1000) == 0);
  CHECK(hidden_library_us(2, 1000) == 0);
  // From the third, all count: 3 x 1 ms, 27 x 1 ms, 209 x 100 us.
  CHECK(hidden_library_us(3, 1000) == Approx(3000));
  CHECK(hidden_library_us(27, 1000) == Approx(27000));
  CHECK(hidden_library_us(209, 100) == Approx(20900));
  CHECK(hidden_library_us(50, 0) == 0);  // not sampled
}

TEST_CASE("library samples: over the timed calls, the densely sampled calls count where the timed ones hold too few") {
  // 16 timed calls at 1 ms with two library samples (tolerated), 2 dense calls at 50 us with 7:
  // 350 us in the dense calls, 175 us a call, 2800 us over the 16 timed calls.
  CHECK(hidden_library_us({2, 1000, 16}, {7, 50, 2}) == Approx(2800));
  // The timed calls' own samples where they count (3 x 1 ms), the dense calls' then unused.
  CHECK(hidden_library_us({3, 1000, 16}, {7, 50, 2}) == Approx(3000));
  // Two or fewer in the dense calls: tolerated there as well.
  CHECK(hidden_library_us({0, 1000, 16}, {2, 50, 2}) == 0);
  // No dense calls (sampling them off, or the kernel refused the period): the timed calls alone.
  CHECK(hidden_library_us({2, 1000, 16}, {0, 0, 0}) == 0);
  CHECK(hidden_library_us({0, 1000, 16}, {0, 50, 0}) == 0);
}

TEST_CASE("library samples: the served routines' time is their marks' unless more samples landed inside than they explain") {
  // Three honest 100 us routine calls (300 us marked) hold a 1 ms sample about one time in three:
  // their time stays 300 us, not 1 ms (the plan test that took it for 1 ms called the plan lazy).
  CHECK(served_routine_us(300, 0, 1000) == Approx(300));
  CHECK(served_routine_us(300, 1, 1000) == Approx(300));
  CHECK(served_routine_us(300, 2, 1000) == Approx(300));
  // Forged marks with no CPU time around a hidden 3 ms call (however it is split into spans): the
  // samples count, past the two any marks are allowed.
  CHECK(served_routine_us(0, 2, 1000) == Approx(0));
  CHECK(served_routine_us(0, 3, 1000) == Approx(3000));
  CHECK(served_routine_us(0, 14, 1000) == Approx(14000));
  // 4 ms marked: 4 samples expected, 2 + 3 x 2 more allowed (12); 13 are 13 ms.
  CHECK(served_routine_us(4000, 12, 1000) == Approx(4000));
  CHECK(served_routine_us(4000, 13, 1000) == Approx(13000));
  // 100 ms marked, 100 expected: up to 132 are the marks' time, 133 count.
  CHECK(served_routine_us(100000, 132, 1000) == Approx(100000));
  CHECK(served_routine_us(100000, 133, 1000) == Approx(133000));
  CHECK(served_routine_us(500, 40, 0) == Approx(500));  // not sampled
}
