#include "turnrl/core/hash.h"

#include <fmt/format.h>

namespace turnrl {

std::string hex64(uint64_t value) { return fmt::format("{:016x}", value); }

}  // namespace turnrl
