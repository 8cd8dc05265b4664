#include "turnrl/core/install_paths.h"

#include <filesystem>

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "turnrl/core/error.h"

// Configure-time folders, defined for this file only (CMakeLists.txt): the install layout under
// CMAKE_INSTALL_PREFIX, and the build and source trees for runs from the build tree.
#ifndef TURNRL_INSTALL_LIBEXEC_DIR
#error "install_paths.cpp needs TURNRL_INSTALL_LIBEXEC_DIR, _INCLUDE_DIR, _DATA_DIR, TURNRL_BUILD_TREE and _SOURCE_TREE"
#endif

namespace turnrl {
namespace {

std::string program_dir(const std::string& program) {
  const size_t slash = program.rfind('/');
  return slash == std::string::npos ? "." : program.substr(0, slash);
}

std::string running_program() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// The `turnrl` program on PATH, or "".
std::string turnrl_on_path() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/turnrl";
    if (::access(candidate.c_str(), X_OK) == 0) {
      char buf[4096];
      const char* real = ::realpath(candidate.c_str(), buf);
      return real ? real : candidate;
    }
  }
  return "";
}

bool under(const std::string& path, const std::string& folder) {
  return !folder.empty() && path.compare(0, folder.size() + 1, folder + "/") == 0;
}

const char* override_variable(TurnrlFiles kind) {
  switch (kind) {
    case TurnrlFiles::helpers: return "TURNRL_WORKER_DIR";
    case TurnrlFiles::headers: return "TURNRL_INCLUDE_DIR";
    case TurnrlFiles::data: return "TURNRL_DATA_DIR";
  }
  return "";
}

// A prefix's folder for `kind` (prefix = the folder above bin/).
std::vector<std::string> prefix_dirs(TurnrlFiles kind, const std::string& bin_dir) {
  switch (kind) {
    case TurnrlFiles::helpers: return {bin_dir, bin_dir + "/../libexec/turnrl"};
    case TurnrlFiles::headers: return {bin_dir + "/../include"};
    case TurnrlFiles::data: return {bin_dir + "/../share/turnrl"};
  }
  return {};
}

}  // namespace

std::vector<std::string> turnrl_search_dirs(TurnrlFiles kind) {
  std::vector<std::string> dirs;
  auto add = [&](const std::string& d) {
    if (d.empty()) return;
    for (const std::string& seen : dirs)
      if (seen == d) return;
    dirs.push_back(d);
  };
  if (const char* d = std::getenv(override_variable(kind)); d && *d) add(d);
  const std::string self = running_program();
  if (!self.empty())
    for (const std::string& d : prefix_dirs(kind, program_dir(self))) add(d);
  const std::string on_path = turnrl_on_path();
  if (!on_path.empty())
    for (const std::string& d : prefix_dirs(kind, program_dir(on_path))) add(d);
  switch (kind) {
    case TurnrlFiles::helpers: add(TURNRL_INSTALL_LIBEXEC_DIR); break;
    case TurnrlFiles::headers: add(TURNRL_INSTALL_INCLUDE_DIR); break;
    case TurnrlFiles::data: add(TURNRL_INSTALL_DATA_DIR); break;
  }
  if (under(self, TURNRL_BUILD_TREE)) {
    switch (kind) {
      case TurnrlFiles::helpers: add(TURNRL_BUILD_TREE "/bin"); break;
      case TurnrlFiles::headers: add(TURNRL_SOURCE_TREE "/include"); break;
      case TurnrlFiles::data: add(TURNRL_SOURCE_TREE); break;
    }
  }
  return dirs;
}

std::string find_turnrl_file(TurnrlFiles kind, const std::string& relative) {
  const std::vector<std::string> dirs = turnrl_search_dirs(kind);
  const int mode = kind == TurnrlFiles::helpers ? X_OK : R_OK;
  for (const std::string& d : dirs) {
    const std::string path = d + "/" + relative;
    // Normalised ("bin/../include" -> "include"): the evaluator's sandbox mounts these folders at
    // the same paths, and a mount point cannot be spelled through "..".
    if (::access(path.c_str(), mode) == 0) return std::filesystem::path(path).lexically_normal().string();
  }
  fail("'{}' not found; looked in: {} (set {} to the folder that has it)", relative, fmt::join(dirs, ", "),
       override_variable(kind));
}

}  // namespace turnrl
