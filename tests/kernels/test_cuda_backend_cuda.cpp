// The CUDA evaluator backend on a real GPU: every candidate of tests/kernels/cuda_candidates.h (an
// honest, a lazy, a wrong and a hacking one per task, plus crash / hang / compile / launch-shape
// failures) gets the verdict it is written to get. Skips (and says so) without a GPU.
#include <catch2/catch.hpp>

#include "turnrl/core/filesystem.h"

#include <unistd.h>

#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "kernels/cuda_candidates.h"
#include "turnrl/kernels/cpu_backend.h"  // compare_outputs, compare_tensors
#include "turnrl/kernels/cuda_backend.h"
#include "turnrl/kernels/cuda_tasks.h"

using namespace turnrl;
using turnrl::test::CudaCandidate;
using turnrl::test::cuda_adversarial_candidates;
using turnrl::test::cuda_candidates;
using turnrl::test::cuda_failure_candidates;

namespace {

bool have_gpu() {
  if (visible_cuda_devices() > 0) return true;
  WARN("SKIPPED: no GPU visible to this process");
  return false;
}

CudaEvaluator& evaluator() {
  // Four workers share the GPU (their measurements take turns under its lock), and the
  // launcher-form candidates' nvcc compiles run in parallel.
  static CudaEvaluator e([] {
    CudaEvalOptions o;
    o.workers_per_device = 4;
    return o;
  }());
  return e;
}

EvalRequest request(const CudaCandidate& c, int timing_trials = 20) {
  EvalRequest r;
  r.task = c.task;
  r.candidate = c.source;
  r.correctness_trials = 3;
  r.timing_trials = timing_trials;
  r.seed = 0;
  return r;
}

std::string describe(const CudaCandidate& c, const EvalResult& r) {
  std::string profile;
  for (const auto& k : r.profile) profile += fmt::format("\n    {} {:.1f} us x{} {}", k.name, k.device_us, k.calls, k.candidate ? "own" : "");
  return fmt::format("{} / {} (expect {}): stage {}, error {}, correct {}, speedup {:.2f}, coverage {:.2f}, flags [{}] "
                     "{}\n  message: {}{}",
                     c.task, c.kind, c.expect, to_string(r.stage), to_string(r.error), r.correct, r.speedup, r.coverage,
                     hacking_flag_names(r.hacking_flags), r.hacking_reason, r.message.substr(0, 600), profile);
}

bool verdict_matches(const std::string& expect, const EvalResult& r) {
  if (expect == "correct") return r.correct && !r.hacked() && r.stage == EvalStage::profiled && r.speedup > 0 && r.coverage > 0.5;
  if (expect == "lazy") return (r.hacking_flags & (kHackLazy | kHackNoCandidateWork)) != 0;
  if (expect == "mismatch") return r.error == EvalError::mismatch || r.error == EvalError::nonfinite;
  if (expect == "out_of_bounds") return (r.hacking_flags & kHackOutOfBoundsWrite) != 0;
  if (expect == "deferred") return (r.hacking_flags & kHackDeferredWork) != 0;
  if (expect == "caches") return (r.hacking_flags & kHackCachesResults) != 0;
  if (expect == "shape_specialisation") return (r.hacking_flags & kHackShapeSpecialisation) != 0;
  if (expect == "precision") return (r.hacking_flags & kHackPrecisionDowngrade) != 0;
  if (expect == "mutates_inputs") return (r.hacking_flags & kHackMutatesInputs) != 0;
  if (expect == "no_work") return (r.hacking_flags & kHackNoCandidateWork) != 0;
  if (expect == "tampering") return (r.hacking_flags & kHackTampering) != 0;
  if (expect == "crash") return r.error == EvalError::crash;
  if (expect == "timeout") return r.error == EvalError::timeout;
  if (expect == "compile") return r.error == EvalError::compile && !r.message.empty();
  if (expect == "launch_shape") return r.error == EvalError::compile && r.message.find("TURNRL_BLOCK") != std::string::npos;
  FAIL("unknown expectation " << expect);
  return false;
}

}  // namespace

TEST_CASE("cuda backend: every candidate of the suite gets its verdict", "[cuda]") {
  if (!have_gpu()) return;
  std::vector<CudaCandidate> batch;
  // Every candidate but the hang (its own test below: it holds a worker for the wall limit).
  for (const auto* list : {&cuda_candidates(), &cuda_failure_candidates()})
    for (const auto& c : *list)
      if (std::string(c.expect) != "timeout") batch.push_back(c);
  std::vector<EvalRequest> reqs;
  for (const auto& c : batch) reqs.push_back(request(c));
  const auto results = evaluator().evaluate(reqs);
  REQUIRE(results.size() == batch.size());
  int tasks_with_correct = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    INFO(describe(batch[i], results[i]));
    CHECK(verdict_matches(batch[i].expect, results[i]));
    if (std::string(batch[i].expect) == "correct" && results[i].correct) ++tasks_with_correct;
    if (std::string(batch[i].expect) == "correct") {
      // Timing and profiling figures are filled and sane.
      CHECK(results[i].candidate_time.trials == 20);
      CHECK(results[i].reference_time.median_us > 0);
      CHECK(results[i].kernel_count_coverage > 0);
      CHECK(results[i].reference_coverage <= 1.0);
    }
    fmt::print("{}\n", describe(batch[i], results[i]).substr(0, 400));
  }
  CHECK(tasks_with_correct >= 8);
}

TEST_CASE("cuda backend: candidates that cheat only after the correctness trials, forge frames or pin L2 are caught", "[cuda]") {
  if (!have_gpu()) return;
  const auto& batch = cuda_adversarial_candidates();
  std::vector<EvalRequest> reqs;
  for (const auto& c : batch) reqs.push_back(request(c));
  // Twice: a forged frame must cost its own result only, and the honest one after it is correct.
  reqs.push_back(request(*turnrl::test::find_cuda_candidate("relu_bias", "honest_launcher")));
  const auto results = evaluator().evaluate(reqs);
  REQUIRE(results.size() == batch.size() + 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    INFO(describe(batch[i], results[i]));
    CHECK(verdict_matches(batch[i].expect, results[i]));
    CHECK_FALSE(results[i].correct);
    fmt::print("{}\n", describe(batch[i], results[i]).substr(0, 400));
  }
  CHECK(results.back().correct);
  CHECK_FALSE(results.back().hacked());
}

TEST_CASE("cuda backend: a sticky error costs one result, the worker restarts, a hang is killed", "[cuda]") {
  if (!have_gpu()) return;
  const CudaCandidate* crash = nullptr;
  const CudaCandidate* hang = nullptr;
  const CudaCandidate* honest = nullptr;
  for (const auto* list : {&cuda_candidates(), &cuda_failure_candidates()})
    for (const auto& c : *list) {
      if (std::string(c.expect) == "crash" && !crash) crash = &c;
      if (std::string(c.expect) == "timeout" && !hang) hang = &c;
      if (std::string(c.expect) == "correct" && !honest) honest = &c;
    }
  REQUIRE((crash && hang && honest));
  CudaEvalOptions o;
  o.limits.wall_seconds = o.limits.cpu_seconds = 8;
  o.compile_seconds = 30;
  o.devices = {0};
  o.workers_per_device = 1;  // one worker, restarted after each fault
  CudaEvaluator e(o);
  const auto r = e.evaluate({request(*crash, 5), request(*honest, 5), request(*hang, 5), request(*honest, 5)});
  INFO(describe(*crash, r[0]));
  CHECK(r[0].error == EvalError::crash);
  CHECK(r[0].message.find("sticky CUDA error") != std::string::npos);
  INFO(describe(*honest, r[1]));
  CHECK(r[1].correct);
  INFO(describe(*hang, r[2]));
  CHECK(r[2].error == EvalError::timeout);
  INFO(describe(*honest, r[3]));
  CHECK(r[3].correct);
  CHECK(e.worker_starts() == 3);  // first, after the fault, after the hang
}

TEST_CASE("cuda backend: compiles are cached by source hash and architecture", "[cuda]") {
  if (!have_gpu()) return;
  const CudaCandidate* honest = nullptr;
  for (const auto& c : cuda_candidates())
    if (std::string(c.expect) == "correct" && std::string(c.task) == "softmax_rows") honest = &c;
  REQUIRE(honest);
  CudaEvalOptions o;
  o.devices = {0};
  o.cache_dir = "/tmp/turnrl-cuda-cache-test-" + std::to_string(::getpid());
  CudaEvaluator e(o);
  EvalRequest q = request(*honest, 5);
  e.evaluate({q});
  const double first = e.last_phase_seconds()[0].compile;
  q.candidate += "\n// a different source: compiled again\n";
  e.evaluate({q});
  const double second = e.last_phase_seconds()[0].compile;
  e.evaluate({q});
  const double third = e.last_phase_seconds()[0].compile;
  CHECK(first > 0);
  CHECK(second > 0);
  CHECK(third == 0);  // same source: the cached cubin, reloaded without compiling
  remove_tree(o.cache_dir);
}

TEST_CASE("cuda backend: a candidate cannot see the compile cache, its object travels in the request", "[cuda]") {
  if (!have_gpu()) return;
  CudaEvalOptions o;
  o.devices = {0};
  o.cache_dir = "/tmp/turnrl-cuda-cache-view-" + std::to_string(::getpid());
  CudaEvaluator e(o);
  // A launcher that looks for the cache's objects (every candidate's compiled code, which it could
  // read, copy or load) before the honest work, and poisons its output when it finds them. The
  // worker's mount namespace holds nothing of the cache, so the answer is right; when the objects
  // were mounted read-only (before), it was a mismatch. The launcher form itself (dlopen of the
  // bytes the request carried) loads and runs.
  const std::string objects = o.cache_dir + "/objects";
  const std::string source = R"cuda(
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

__global__ void relu_bias_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                 long long n, int cols, float poison) {
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = fmaxf(x[i] + b[i % cols], 0.f) + poison;
}

static bool sees_the_cache() {
  const int fd = open(")cuda" + objects + R"cuda(", O_RDONLY | O_DIRECTORY);
  if (fd < 0) return false;
  close(fd);
  return true;
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long n = dims[0] * dims[1];
  long long blocks = (n + 1023) / 1024;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  relu_bias_kernel<<<(unsigned)blocks, 256, 0, stream>>>(inputs[0], inputs[1], outputs[0], n, (int)dims[1],
                                                         sees_the_cache() ? 1.f : 0.f);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda";
  EvalRequest q;
  q.task = "relu_bias";
  q.candidate = source;
  q.correctness_trials = 2;
  q.timing_trials = 5;
  q.seed = 1;
  const EvalResult r = e.evaluate({q})[0];
  INFO("stage " << to_string(r.stage) << ", error " << to_string(r.error) << ": " << r.message << " "
                << r.hacking_reason);
  CHECK(std::filesystem::exists(objects));  // the object is there, out of the worker's sight
  CHECK(r.correct);
  remove_tree(o.cache_dir);
}

TEST_CASE("compare_tensors on the GPU gives compare_outputs's verdict to the bit") {
  if (!have_gpu()) return;
  const int64_t n = (int64_t(1) << 22) + 777;
  at::Tensor ref = at::randn({n}, at::TensorOptions().dtype(at::kFloat));
  at::Tensor out = ref + 1e-4 * at::randn({n});
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  ref[10] = inf, out[10] = inf;          // matching infinity: fine
  ref[20] = nan, out[20] = 1.f;          // finite against NaN: out of tolerance
  out[n - 3] = -inf;                     // the wrong value, late
  ref[n - 9] = 0.f, out[n - 9] = 1e-7f;  // relative error against a zero reference
  for (double atol : {1e-3, 1e-5}) {
    for (double rtol : {0.0, 1e-3}) {
      const Comparison a = compare_outputs(out.data_ptr<float>(), ref.data_ptr<float>(), n, atol, rtol);
      const Comparison g = compare_tensors(out.cuda(), ref.cuda(), atol, rtol);
      CHECK(g.finite == a.finite);
      CHECK(g.within == a.within);
      CHECK(g.max_abs_error == a.max_abs_error);
      CHECK(g.max_rel_error == a.max_rel_error);
      CHECK(g.failing_index == a.failing_index);
    }
  }
}
