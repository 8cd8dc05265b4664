#pragma once
// Writes whose every failure is seen: each write() result, the fsync() that makes the data
// durable (a full disk may only show there) and the close() are checked, and a failure throws
// turnrl::Error naming the file and the system's reason ("... 'run/metrics.jsonl': File too large").
// Every file the library writes for a user (metrics, samples, configs, reports, checkpoints'
// side files) goes through here, so a run never goes on after losing what it meant to keep.
#include <string>

namespace turnrl {

// Creates or truncates `path` and writes `content` to it, flushed to disk. A missing parent
// directory, a directory at `path` and a failed write each throw.
void write_file(const std::string& path, const std::string& content);

// Writes `content` to a temporary file next to `path`, flushes it and renames it over `path`, so
// a reader sees the old content or the new, never a part. On failure the temporary file is removed
// and `path` is left as it was.
void write_file_atomically(const std::string& path, const std::string& content);

// A file opened for appending (created when absent); append() writes the whole text and flushes
// it to disk before it returns, so a line either reached the disk or the caller hears why not.
class AppendFile {
 public:
  AppendFile() = default;
  explicit AppendFile(const std::string& path);
  ~AppendFile();
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  void append(const std::string& text);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace turnrl
