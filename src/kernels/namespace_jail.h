#pragma once
// The namespaces half of the sandbox (internal to src/kernels; sandbox.h describes what it isolates).
// plan_jail runs in the parent and prepares everything; enter_jail runs in the forked child, where
// only async-signal-safe calls are allowed (the parent has other threads), and returns only in
// the process that must exec the program.
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "syscall_filter.h"
#include "turnrl/kernels/sandbox.h"

namespace turnrl::sandbox_detail {

struct JailPlan {
  struct Bind {
    std::string source;          // host path (opened O_PATH before privileges are dropped)
    std::string target;          // host path of the mount point under root
    bool writable = false;
    unsigned long keep_flags = 0;  // nosuid/nodev/noexec/atime flags of the source's mount, kept on remount
    bool device = false;
    int fd = -1;
    char fd_path[32] = {};       // "/proc/self/fd/<fd>", composed after fork
  };
  std::string root;              // host directory: the tmpfs root's mount point and the exchange
                                 // directory for inputs and outputs
  std::string tmpfs_options;     // "size=...,mode=0755"
  std::vector<Bind> binds;
  std::vector<std::string> directories;  // host paths under root, parents first
  std::vector<std::string> files;        // host paths under root: empty files to bind files onto
  std::vector<std::pair<std::string, std::string>> links;  // (link text, host path under root)
  std::string proc_target;       // root + "/proc"
  std::vector<std::string> inputs, outputs;  // file names in root / in /sandbox
  std::vector<std::string> inside_inputs, inside_outputs;  // "/sandbox/<name>"
  int64_t output_file_bytes = 0;
  bool inside_root = false;      // the trainer is root: root inside is root outside (the jail's
                                 // set-up), the program's uid 1000 is nobody outside
  std::string uid_map, gid_map;  // written by the parent into /proc/<child>/
  int ready_pipe[2] = {-1, -1};  // child -> parent: "my namespaces exist, map my ids"
  int go_pipe[2] = {-1, -1};     // parent -> child: "mapped"
  int processes = 0;             // RLIMIT_NPROC inside the user namespace
  SyscallFilter filter;          // the tool profile, installed before exec
};

// The view for one program: /usr and the loader's files, the directories of the libraries this
// process has loaded and of $LD_LIBRARY_PATH, the program itself and limits'
// visible/writable paths and devices, on a tmpfs of limits.scratch_bytes. A root trainer hands
// the writable paths to nobody, the sandbox's user outside.
JailPlan plan_jail(const SandboxLimits& limits, const std::string& root, const std::string& program,
                   const std::vector<std::string>& inputs, const std::vector<std::string>& outputs);

// What the view for `program` shows read-only, devices marked: the system paths, the folders of
// the loaded libraries and of the compilers, the devices, the program and limits.visible_paths.
// A tool run without namespaces (rlimits-only) may read only these, with Landlock (sandbox.cpp).
struct ViewedPath {
  std::string path;
  bool device = false;
};
std::vector<ViewedPath> read_only_view(const SandboxLimits& limits, const std::string& program);

// In the parent, right after fork: waits for the child's new user namespace, writes its id maps
// and lets it go on; closes the plan's pipes. False when the child gave up or a map was refused
// (the child then exits with its reason on fd 2).
bool map_jail_identity(JailPlan& plan, pid_t child);

// In the forked child (fds 0-2, and 3 for a worker, in place; nothing else open but the plan's
// pipes): enters
// the namespaces, builds the file system and forks twice (an init for the new pid namespace, then
// the program's process). Returns only in the program's process, with /sandbox as working directory;
// the two others exit with the program's exit status or die of its signal. On failure writes
// "turnrl sandbox: <step> failed: <errno name>" to fd 2 and exits with status 126.
void enter_jail(JailPlan& plan);

// In the program's process just before exec: switches to the sandbox user, sets RLIMIT_NPROC and
// installs the plan's seccomp filter.
void seal_jail(JailPlan& plan);

}  // namespace turnrl::sandbox_detail
