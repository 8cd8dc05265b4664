#pragma once
// turnrl::Error: the one exception type library code throws. Messages name the field, the value
// and what is allowed, e.g. "advantage.estimator: unknown name 'grpoo'; allowed: trloo, rloo, ...".
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11)

namespace turnrl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Throws Error(message) unless condition holds. For checks whose message is cheap to build.
inline void require(bool condition, const std::string& message) {
  if (!condition) throw Error(message);
}

}  // namespace turnrl
