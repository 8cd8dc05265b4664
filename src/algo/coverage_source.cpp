#include "turnrl/algo/coverage_source.h"

#include "turnrl/core/error.h"

namespace turnrl {

const char* to_string(CoverageSource v) {
  switch (v) {
    case CoverageSource::true_share: return "true_share";
    case CoverageSource::reference: return "reference";
    case CoverageSource::kernel_count: return "kernel_count";
  }
  return "?";
}

CoverageSource parse_coverage_source(const std::string& name, const std::string& field) {
  for (CoverageSource v : {CoverageSource::true_share, CoverageSource::reference, CoverageSource::kernel_count})
    if (name == to_string(v)) return v;
  fail("{}: unknown value '{}'; allowed: true_share, reference, kernel_count", field, name);
}

}  // namespace turnrl
