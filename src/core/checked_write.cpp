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

}  // namespace

CheckedFile::CheckedFile(const std::string& path, Mode mode) : path_(path) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (mode == Mode::append ? O_APPEND : O_TRUNC);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) fail_errno("open for writing", path, errno);
}

CheckedFile::~CheckedFile() {
  if (fd_ >= 0) ::close(fd_);
}

CheckedFile::CheckedFile(CheckedFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

CheckedFile& CheckedFile::operator=(CheckedFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

// write() may write less than asked (a signal, a limit reached half-way): loop until all of it
// is written or the kernel says why not.
void CheckedFile::write(std::string_view text) {
  if (fd_ < 0) fail("cannot write '{}': the file is not open", path_);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_errno("write", path_, n < 0 ? errno : ENOSPC);
    done += size_t(n);
  }
}

void CheckedFile::sync() {
  if (fd_ < 0) fail("cannot flush '{}': the file is not open", path_);
  if (::fsync(fd_) != 0) fail_errno("flush to disk", path_, errno);
}

void CheckedFile::close() {
  sync();
  const int closed = ::close(std::exchange(fd_, -1)) == 0 ? 0 : errno;
  if (closed) fail_errno("close", path_, closed);
}

void write_file(const std::string& path, const std::string& content) {
  CheckedFile file(path, CheckedFile::Mode::truncate);
  file.write(content);
  file.close();
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

}  // namespace turnrl
