#pragma once
// Internal to the sandboxed evaluator backends (cpu, cuda): a content-addressed cache of compiled
// candidates (shared objects, cubins) that only the parent process writes.
//
//   <dir>/objects/<key><ext>   the objects: never in a worker's view (each travels in its
//                              request, object_bytes below); a sandboxed tool (objdump) sees them
//                              read-only
//   <dir>/<key>.sum            the FNV-1a of each object's bytes when it was published
//   <dir>/<key>.err            a failed compile's log (served again without compiling)
//
// The directory is the trainer's (0700, objects/ readable by the sandbox's user); no candidate
// code ever runs with it in view. A compile runs in a private directory through the backend's
// CompileStep (a sandboxed compiler) and its object is published atomically, so concurrent
// compiles of one key rename the same bytes. verified() hashes an object again before it is
// handed out: one changed since it was published is never loaded, but removed and compiled again.
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "turnrl/kernels/cpu_backend.h"  // CompiledCandidate, object_hash
#include "turnrl/kernels/sandbox.h"

namespace turnrl::eval_detail {

struct CompileOutcome {
  bool ok = false;
  std::string log;
};
// Compiles `dir`/<source_name> into `dir`/<object_name>.
using CompileStep = std::function<CompileOutcome(const std::string& dir)>;

// A sandboxed compiler's run as a CompileOutcome: compiled when it exited 0; its messages with
// every `dirs` prefix cut (they name the candidate's file only, never a host or sandbox path) and
// trimmed to message_chars, after the sandbox's own message when the sandbox stopped it.
CompileOutcome compile_outcome(const CommandResult& run, const std::string& compiler, const std::vector<std::string>& dirs,
                               size_t message_chars);

// The bytes of c's object, checked against the hash recorded when it was compiled: what a backend
// checks is what it sends to its worker. Throws turnrl::Error naming the object when they differ.
std::string object_bytes(const CompiledCandidate& c);

class ObjectCache {
 public:
  // Creates dir and dir/objects with their permissions. object_extension: ".so", ".cubin", ...
  ObjectCache(std::string dir, std::string source_name, std::string object_name, std::string object_extension);

  const std::string& objects_dir() const { return objects_dir_; }
  // The object of `key` (CompiledCandidate::hash; library_path is the object, whatever its kind),
  // from memory, from disk (its recorded hash matching), or compiled from `source` by `compile`.
  CompiledCandidate get(const std::string& key, const std::string& source, const CompileStep& compile);
  // get(), then the object's bytes hashed again (see above; replaced() counts the recompiles).
  CompiledCandidate verified(const std::string& key, const std::string& source, const CompileStep& compile);

  int compiles() const { return compiles_.load(); }
  int replaced() const { return replaced_.load(); }

 private:
  std::string dir_, objects_dir_, source_name_, object_name_, extension_;
  std::mutex mu_;
  std::map<std::string, CompiledCandidate> memo_;
  std::atomic<int> compiles_{0}, replaced_{0};
};

}  // namespace turnrl::eval_detail
