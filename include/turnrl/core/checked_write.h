#pragma once
// Writes whose every failure is seen: each write() result, the fsync() that makes the data
// durable (a full disk may only show there) and the close() are checked, and a failure throws
// turnrl::Error naming the file and the system's reason ("... 'run/metrics.jsonl': File too large").
// Every file the library writes for a user (metrics, samples, configs, reports, checkpoints)
// goes through here, so a run never goes on after losing what it meant to keep.
#include <string>
#include <string_view>

namespace turnrl {

// An open file that checks every operation. Closed (without the checks) by the destructor when
// close() was not called, e.g. while an exception unwinds.
class CheckedFile {
 public:
  enum class Mode { truncate, append };  // truncate creates or empties; append creates or appends

  CheckedFile() = default;
  CheckedFile(const std::string& path, Mode mode);
  ~CheckedFile();
  CheckedFile(CheckedFile&& other) noexcept;
  CheckedFile& operator=(CheckedFile&& other) noexcept;
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;

  // Writes all of `text` (retrying short writes).
  void write(std::string_view text);
  // Flushes what was written to disk.
  void sync();
  // sync(), then close.
  void close();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Creates or truncates `path` and writes `content` to it, flushed to disk. A missing parent
// directory, a directory at `path` and a failed write each throw.
void write_file(const std::string& path, const std::string& content);

// Writes `content` to a temporary file next to `path`, flushes it and renames it over `path`, so
// a reader sees the old content or the new, never a part. On failure the temporary file is removed
// and `path` is left as it was.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace turnrl
