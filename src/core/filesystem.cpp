#include "turnrl/core/filesystem.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace turnrl {
namespace {

// nftw's callback cannot carry state; the first failure is kept per thread.
thread_local int first_errno = 0;
thread_local char first_path[512];

int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  const int rc = type == FTW_DP ? ::rmdir(path) : ::unlink(path);
  if (rc != 0 && errno != ENOENT && first_errno == 0) {
    first_errno = errno;
    std::snprintf(first_path, sizeof first_path, "%s", path);
  }
  return 0;  // keep going: remove as much as possible
}

}  // namespace

bool remove_tree(const std::string& path, std::string* error) {
  struct stat st;
  if (path.empty() || ::lstat(path.c_str(), &st) != 0) return true;
  first_errno = 0;
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) first_errno = errno, std::snprintf(first_path, sizeof first_path, "%s", path.c_str());
  } else if (::nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS) != 0 && first_errno == 0) {
    first_errno = errno;
    std::snprintf(first_path, sizeof first_path, "%s", path.c_str());
  }
  if (first_errno != 0 && error) *error = std::string("cannot remove ") + first_path + ": " + std::strerror(first_errno);
  return first_errno == 0;
}

}  // namespace turnrl
