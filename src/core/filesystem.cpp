#include "turnrl/core/filesystem.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "turnrl/core/error.h"

namespace turnrl {

std::string read_file(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open {}: {}", path, what, std::strerror(errno));
  struct stat st;
  const bool known = ::fstat(fd, &st) == 0;
  if (known && S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail("{}: cannot read {}: it is a directory", path, what);
  }
  std::string bytes;
  if (known && S_ISREG(st.st_mode)) bytes.reserve(size_t(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int read_errno = errno;
      ::close(fd);
      fail("{}: cannot read {}: {}", path, what, std::strerror(read_errno));
    }
    bytes.append(buffer, size_t(n));
  }
  ::close(fd);
  return bytes;
}
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
