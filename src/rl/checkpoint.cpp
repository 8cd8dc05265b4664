#include "turnrl/rl/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/model/policy.h"

namespace turnrl {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "step_";
constexpr const char* kTempPrefix = ".tmp-step_";

std::optional<int64_t> parse_step(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() == std::char_traits<char>::length(kPrefix)) return std::nullopt;
  const std::string digits = name.substr(std::char_traits<char>::length(kPrefix));
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return std::stoll(digits);
}

// LibTorch's messages carry a stack trace after the first line; the user needs the first line.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

std::string checkpoint_name(int64_t step) { return fmt::format("{}{:08d}", kPrefix, step); }

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("checkpoint: cannot open '{}' to flush it: {}", path, std::strerror(errno));
  const int synced = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  if (synced) fail("checkpoint: cannot flush '{}' to disk: {}", path, std::strerror(synced));
}

std::string write_checkpoint(const std::string& root, int64_t step, const std::function<void(const std::string&)>& write,
                             int64_t keep_last) {
  require(keep_last >= 1, fmt::format("checkpoint.keep_last: {} is out of range; allowed: >= 1", keep_last));
  fs::create_directories(root);
  const fs::path final_dir = fs::path(root) / checkpoint_name(step);
  const fs::path temp_dir = fs::path(root) / fmt::format("{}{:08d}-{}", kTempPrefix, step, ::getpid());
  remove_tree(temp_dir.string());
  fs::create_directories(temp_dir);
  try {
    write(temp_dir.string());
    for (const auto& entry : fs::directory_iterator(temp_dir))
      if (entry.is_regular_file()) fsync_path(entry.path().string());
    fsync_path(temp_dir.string());
  } catch (...) {
    remove_tree(temp_dir.string());
    throw;
  }
  if (fs::exists(final_dir)) {
    // Move the old one aside first: rename() cannot replace a non-empty directory.
    const fs::path old = fs::path(root) / fmt::format("{}{:08d}-old-{}", kTempPrefix, step, ::getpid());
    fs::rename(final_dir, old);
    fs::rename(temp_dir, final_dir);
    remove_tree(old.string());
  } else {
    fs::rename(temp_dir, final_dir);
  }
  fsync_path(root);
  const std::vector<CheckpointEntry> all = list_checkpoints(root);
  for (size_t i = 0; i + size_t(keep_last) < all.size(); ++i) remove_tree(all[i].path);
  return final_dir.string();
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& root) {
  std::vector<CheckpointEntry> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    if (const auto step = parse_step(entry.path().filename().string())) out.push_back({*step, entry.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointEntry> latest_checkpoint(const std::string& root) {
  const auto all = list_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::optional<CheckpointEntry> load_newest_valid_checkpoint(const std::string& root,
                                                            const std::function<void(const std::string&)>& load,
                                                            std::vector<SkippedCheckpoint>* skipped) {
  const std::vector<CheckpointEntry> all = list_checkpoints(root);
  std::vector<SkippedCheckpoint> failed;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      load(it->path);
      if (skipped) *skipped = std::move(failed);
      return *it;
    } catch (const std::exception& e) {
      failed.push_back({*it, first_line(e.what())});
    }
  }
  if (failed.empty()) return std::nullopt;
  std::string list;
  for (const auto& f : failed) list += fmt::format("\n  {}: {}", f.entry.path, f.reason);
  fail("resume: none of the {} checkpoints under '{}' can be loaded:{}", failed.size(), root, list);
}

void save_checkpoint_file(const std::string& file, const std::function<void(const std::string& path)>& save) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) fail("checkpoint: cannot write '{}': no pipe: {}", file, std::strerror(errno));
  const int read_end = pipe_fds[0], write_end = pipe_fds[1];
  std::string write_error;
  CheckedFile out;
  try {
    out = CheckedFile(file, CheckedFile::Mode::truncate);
  } catch (const Error& e) {
    write_error = e.what();
  }
  // Drains the pipe into the file; after a failed write it keeps draining (and discarding), so
  // that `save` never blocks on a full pipe.
  std::thread copier([&] {
    std::vector<char> chunk(1 << 16);
    for (;;) {
      const ssize_t n = ::read(read_end, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (!write_error.empty()) continue;
      try {
        out.write(std::string_view(chunk.data(), size_t(n)));
      } catch (const Error& e) {
        write_error = e.what();
      }
    }
  });
  std::string save_error;
  try {
    save("/proc/self/fd/" + std::to_string(write_end));
  } catch (const std::exception& e) {
    save_error = first_line(e.what());
  }
  ::close(write_end);  // the copier sees the end once `save` closed its own descriptor too
  copier.join();
  ::close(read_end);
  if (!write_error.empty()) fail("checkpoint: {}", write_error);
  if (!save_error.empty()) fail("checkpoint: cannot write '{}': {}", file, save_error);
  out.close();
}

void save_checkpoint_folder(const std::string& folder, const std::function<void(const std::string& path)>& save) {
  remove_tree(folder);
  fs::create_directories(folder);
  try {
    save(folder);
  } catch (const std::exception& e) {
    fail("checkpoint: cannot write '{}': {}", folder, first_line(e.what()));
  }
  for (const auto& entry : fs::recursive_directory_iterator(folder))
    if (entry.is_regular_file()) fsync_path(entry.path().string());
  fsync_path(folder);
}

const char* policy_checkpoint_entry(const Policy& policy) { return policy.saves_folder() ? "policy" : "policy.pt"; }

void save_policy_checkpoint(Policy& policy, const std::string& dir) {
  const std::string entry = dir + "/" + policy_checkpoint_entry(policy);
  const auto save = [&](const std::string& path) { policy.save(path); };
  if (policy.saves_folder())
    save_checkpoint_folder(entry, save);
  else
    save_checkpoint_file(entry, save);
}

void load_policy_checkpoint(Policy& policy, const std::string& path) {
  // A checkpoint directory holds policy.pt or, for a policy that saves a folder, policy/; a folder
  // policy also loads from its own folder (an exported one).
  std::string stored = path;
  if (fs::is_directory(path)) {
    const fs::path inside = fs::path(path) / policy_checkpoint_entry(policy);
    if (!policy.saves_folder() || fs::exists(inside)) stored = inside.string();
  }
  if (!fs::exists(stored)) fail("checkpoint: no policy file '{}'", stored);
  policy.load(stored);
}

int remove_incomplete_checkpoints(const std::string& root) {
  if (!fs::is_directory(root)) return 0;
  std::vector<fs::path> temps;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string().rfind(kTempPrefix, 0) == 0) temps.push_back(entry.path());
  for (const auto& p : temps) remove_tree(p.string());
  return int(temps.size());
}

}  // namespace turnrl
