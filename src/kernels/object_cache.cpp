#include "object_cache.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/core/hash.h"
#include "turnrl/kernels/sandbox.h"
#include "worker_round_trip.h"

namespace turnrl::eval_detail {
namespace fs = std::filesystem;

CompileOutcome compile_outcome(const CommandResult& run, const std::string& compiler, const std::vector<std::string>& dirs,
                               size_t message_chars) {
  std::string log = run.output;
  for (const std::string& dir : dirs) {
    const std::string prefix = dir + "/";
    for (size_t p = log.find(prefix); p != std::string::npos; p = log.find(prefix, p)) log.erase(p, prefix.size());
  }
  CompileOutcome out;
  out.ok = run.status == SandboxStatus::ok && run.exit_code == 0;
  out.log = trim_message(log, message_chars);
  if (run.status != SandboxStatus::ok) out.log = compiler + " " + run.message + "\n" + out.log;
  return out;
}

std::string object_bytes(const CompiledCandidate& c) {
  std::string bytes = read_file(c.library_path);
  if (bytes.empty() || hex64(fnv1a64(bytes)) != c.object_hash)
    fail("evaluator: the cached object {} changed after it was compiled; not sent to a worker", c.library_path);
  return bytes;
}

ObjectCache::ObjectCache(std::string dir, std::string source_name, std::string object_name, std::string object_extension)
    : dir_(std::move(dir)),
      objects_dir_((fs::path(dir_) / "objects").string()),
      source_name_(std::move(source_name)),
      object_name_(std::move(object_name)),
      extension_(std::move(object_extension)) {
  fs::create_directories(objects_dir_);
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace);
  // Sandboxed tools that read an object (the CPU backend's objdump) run as the sandbox's own user
  // (nobody, for a root trainer): objects are readable by all, writable by the trainer only.
  fs::permissions(objects_dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                    fs::perms::others_read | fs::perms::others_exec,
                  fs::perm_options::replace);
}

CompiledCandidate ObjectCache::get(const std::string& key, const std::string& source, const CompileStep& compile) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = memo_.find(key); it != memo_.end()) {
      CompiledCandidate hit = it->second;
      hit.cached = true;
      hit.seconds = 0;
      return hit;
    }
  }
  CompiledCandidate c;
  c.hash = key;
  const fs::path object = fs::path(objects_dir_) / (key + extension_);
  const fs::path sum = fs::path(dir_) / (key + ".sum");
  const fs::path err = fs::path(dir_) / (key + ".err");
  if (fs::exists(object) && fs::exists(sum) && read_file(sum.string()) == object_hash(object.string())) {
    c.ok = c.cached = true;
    c.library_path = object.string();
    c.object_hash = read_file(sum.string());
  } else if (fs::exists(err)) {
    c.log = read_file(err.string());
    c.cached = true;
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string work = make_private_dir("turnrl-compile");
    if (work.empty()) fail("evaluator: cannot create a compile directory under $TMPDIR");
    { std::ofstream(fs::path(work) / source_name_) << source; }
    const CompileOutcome out = compile(work);
    ++compiles_;
    const fs::path built = fs::path(work) / object_name_;
    c.log = out.log;
    c.ok = out.ok && fs::is_regular_file(built);
    // Publish atomically: a concurrent compile of the same key renames the same bytes.
    const std::string tmp_suffix = fmt::format(".tmp{}", fnv1a64(work));
    std::error_code ec;
    if (c.ok) {
      const fs::path tmp = fs::path(objects_dir_) / (key + tmp_suffix);
      fs::copy_file(built, tmp, fs::copy_options::overwrite_existing, ec);
      c.object_hash = ec ? "" : object_hash(tmp.string());
      if (!ec) { std::ofstream(sum.string() + tmp_suffix) << c.object_hash; }
      if (!ec) fs::rename(sum.string() + tmp_suffix, sum, ec);
      if (!ec) fs::rename(tmp, object, ec);
      if (ec) fail("evaluator: cannot write {}: {}", object.string(), ec.message());
      c.library_path = object.string();
    } else {
      { std::ofstream(err.string() + tmp_suffix) << c.log; }
      fs::rename(err.string() + tmp_suffix, err, ec);
    }
    remove_private_dir(work);
    c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::lock_guard<std::mutex> lock(mu_);
  memo_[key] = c;
  return c;
}

CompiledCandidate ObjectCache::verified(const std::string& key, const std::string& source, const CompileStep& compile) {
  CompiledCandidate c = get(key, source, compile);
  if (!c.ok || object_hash(c.library_path) == c.object_hash) return c;
  // Changed since it was published: never load it; drop it and compile again.
  {
    std::lock_guard<std::mutex> lock(mu_);
    memo_.erase(key);
  }
  std::error_code ec;
  fs::remove(c.library_path, ec);
  fs::remove(fs::path(dir_) / (key + ".sum"), ec);
  ++replaced_;
  c = get(key, source, compile);
  if (c.ok && object_hash(c.library_path) != c.object_hash) {
    c.ok = false;
    c.log = "the compiled object changed on disk between compiling and loading, twice";
  }
  return c;
}

}  // namespace turnrl::eval_detail
