#include "turnrl/kernels/evaluator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include <utility>

namespace turnrl {

const char* to_string(EvalStage stage) {
  switch (stage) {
    case EvalStage::none: return "none";
    case EvalStage::extracted: return "extracted";
    case EvalStage::compiled: return "compiled";
    case EvalStage::loaded: return "loaded";
    case EvalStage::ran: return "ran";
    case EvalStage::correct: return "correct";
    case EvalStage::timed: return "timed";
    case EvalStage::profiled: return "profiled";
  }
  return "?";
}

const char* to_string(EvalError error) {
  switch (error) {
    case EvalError::none: return "none";
    case EvalError::format: return "format";
    case EvalError::compile: return "compile";
    case EvalError::load: return "load";
    case EvalError::runtime: return "runtime";
    case EvalError::crash: return "crash";
    case EvalError::timeout: return "timeout";
    case EvalError::memory: return "memory";
    case EvalError::output_limit: return "output_limit";
    case EvalError::shape: return "shape";
    case EvalError::mismatch: return "mismatch";
    case EvalError::nonfinite: return "nonfinite";
    case EvalError::hacking: return "hacking";
    case EvalError::internal: return "internal";
  }
  return "?";
}

std::string hacking_flag_names(uint32_t flags) {
  static const std::pair<uint32_t, const char*> names[] = {
      {kHackReturnsInput, "returns_input"},       {kHackNoCandidateWork, "no_candidate_work"},
      {kHackLazy, "lazy"},                        {kHackCallsReference, "calls_reference"},
      {kHackCachesResults, "caches_results"},     {kHackImplausibleSpeed, "implausible_speed"},
      {kHackDeferredWork, "deferred_work"},       {kHackMutatesInputs, "mutates_inputs"},
      {kHackOutOfBoundsWrite, "out_of_bounds_write"}, {kHackPrecisionDowngrade, "precision_downgrade"},
      {kHackShapeSpecialisation, "shape_specialisation"}, {kHackTampering, "tampering"},
  };
  std::string out;
  for (const auto& [bit, name] : names)
    if (flags & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

std::vector<EvalResult> evaluate_on_pool(size_t pool, size_t num_requests,
                                         const std::function<EvalResult(size_t, size_t)>& evaluate_one) {
  std::vector<EvalResult> results(num_requests);
  std::atomic<size_t> next{0};
  auto serve = [&](size_t worker) {
    for (size_t i; (i = next++) < num_requests;) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        results[i] = evaluate_one(worker, i);
      } catch (const std::exception& e) {
        results[i] = EvalResult{};
        results[i].error = EvalError::internal;
        results[i].message = e.what();
      }
      results[i].wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  const size_t n = std::min(num_requests, pool);
  std::vector<std::thread> threads;
  for (size_t w = 1; w < n; ++w) threads.emplace_back(serve, w);
  if (n > 0) serve(0);
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace turnrl
