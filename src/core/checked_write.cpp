#include "turnrl/core/checked_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "turnrl/core/error.h"

namespace turnrl {
namespace {

[[noreturn]] void fail_errno(const char* action, const std::string& path, int error) {
  fail("cannot {} '{}': {}", action, path, std::strerror(error));
}

int open_for_writing(const std::string& path, int mode_flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode_flags, 0644);
  if (fd < 0) fail_errno("open for writing", path, errno);
  return fd;
}

// write() may write less than asked (a signal, a limit reached half-way): loop until all of it
// is written or the kernel says why not.
void write_all(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_errno("write", path, n < 0 ? errno : ENOSPC);
    done += size_t(n);
  }
}

void sync_and_close(int fd, const std::string& path) {
  const int synced = ::fsync(fd) == 0 ? 0 : errno;
  const int closed = ::close(fd) == 0 ? 0 : errno;
  if (synced) fail_errno("flush to disk", path, synced);
  if (closed) fail_errno("close", path, closed);
}

}  // namespace

void write_file(const std::string& path, const std::string& content) {
  const int fd = open_for_writing(path, O_TRUNC);
  try {
    write_all(fd, content, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  sync_and_close(fd, path);
}

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string temp = fmt::format("{}.tmp-{}", path, ::getpid());
  try {
    write_file(temp, content);
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    fail_errno("replace", path, error);
  }
}

AppendFile::AppendFile(const std::string& path) : fd_(open_for_writing(path, O_APPEND)), path_(path) {}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

void AppendFile::append(const std::string& text) {
  if (fd_ < 0) fail("cannot append to a file that is not open");
  write_all(fd_, text, path_);
  if (::fsync(fd_) != 0) fail_errno("flush to disk", path_, errno);
}

}  // namespace turnrl
