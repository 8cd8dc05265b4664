#pragma once
// CoverageSource: which share-of-time number feeds the profiling-based reward (PR) and rejection
// (PRS). Its own header so that PRS (rejection.h, generic over a per-turn coverage) need not
// include the kernel reward.
#include <string>

namespace turnrl {

// Which coverage number feeds PR (and PRS).
enum class CoverageSource {
  true_share,    // EvalResult.coverage: candidate kernels' device time / all device kernel time
  reference,     // EvalResult.reference_coverage: KernelGYM's time coverage (for reproducing the paper)
  kernel_count,  // EvalResult.kernel_count_coverage: share of kernel launches that are the candidate's
};

const char* to_string(CoverageSource v);
// Parses a config name; throws naming `field` and the allowed values.
CoverageSource parse_coverage_source(const std::string& name, const std::string& field = "reward.coverage.source");

}  // namespace turnrl
