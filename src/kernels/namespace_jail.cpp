#include "namespace_jail.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "turnrl/core/error.h"

namespace turnrl::sandbox_detail {
namespace {

constexpr uid_t kInsideId = 1000;    // the sandbox's uid and gid inside its user namespace
constexpr uid_t kNobody = 65534;     // its outer identity when the trainer is root
constexpr const char* kDevices[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
// Top-level system paths that are links into /usr on merged-/usr systems, directories elsewhere.
constexpr const char* kSystemPaths[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                                        "/etc/ld.so.cache", "/etc/alternatives"};

unsigned long mount_flags_of(const std::string& path) {
  struct statvfs v {};
  if (statvfs(path.c_str(), &v) != 0) return 0;
  unsigned long f = 0;
  if (v.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (v.f_flag & ST_NODEV) f |= MS_NODEV;
  if (v.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (v.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (v.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (v.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

// Collects mounts, links and the directories above them; a visible path that is a link is
// recreated as that link, and its target is made visible too.
struct Planner {
  JailPlan& plan;
  std::set<std::string> dirs_made, targets;

  void parents(const std::string& inside) {
    for (size_t p = inside.find('/', 1); p != std::string::npos; p = inside.find('/', p + 1)) {
      const std::string d = inside.substr(0, p);
      if (dirs_made.insert(d).second) plan.directories.push_back(plan.root + d);
    }
  }
  bool covered(const std::string& path) const {
    for (const auto& b : plan.binds)
      if (!b.writable && path.compare(0, b.source.size() + 1, b.source + "/") == 0) return true;
    return false;
  }
  void add(const std::string& path, bool writable, bool device, int depth = 0) {
    if (path.empty() || path[0] != '/' || depth > 8) return;
    std::string clean = path;
    while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
    // Links among the parents are resolved (/bin/sh is /usr/bin/sh on merged-/usr systems); a
    // link in the last component is recreated below.
    const size_t slash = clean.rfind('/');
    if (slash > 0) {
      char* parent = realpath(clean.substr(0, slash).c_str(), nullptr);
      if (!parent) return;
      clean = std::string(parent) + clean.substr(slash);
      std::free(parent);
    }
    struct stat st {};
    if (lstat(clean.c_str(), &st) != 0 || !targets.insert(clean).second) return;
    if (!writable && covered(clean)) return;
    parents(clean);
    if (S_ISLNK(st.st_mode)) {
      char buf[PATH_MAX];
      const ssize_t n = readlink(clean.c_str(), buf, sizeof buf - 1);
      if (n <= 0) return;
      plan.links.emplace_back(std::string(buf, size_t(n)), plan.root + clean);
      char* real = realpath(clean.c_str(), nullptr);
      if (real) add(real, writable, device, depth + 1), std::free(real);
      return;
    }
    JailPlan::Bind b;
    b.source = clean;
    b.target = plan.root + clean;
    b.writable = writable;
    b.device = device;
    b.keep_flags = mount_flags_of(clean);
    if (S_ISDIR(st.st_mode)) {
      if (dirs_made.insert(clean).second) plan.directories.push_back(b.target);
    } else {
      plan.files.push_back(b.target);
    }
    plan.binds.push_back(std::move(b));
  }
};

// Directories of the shared libraries this process has loaded, and $LD_LIBRARY_PATH's: the
// programs it starts (workers linked against the same LibTorch, wherever it is installed) need them.
std::vector<std::string> library_dirs() {
  static const std::vector<std::string> dirs = [] {
    std::set<std::string> found;
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
      const size_t slash = line.find('/');
      if (slash == std::string::npos) continue;
      const std::string file = line.substr(slash);
      if (file.find(".so") != std::string::npos) found.insert(file.substr(0, file.rfind('/')));
    }
    if (const char* ld = std::getenv("LD_LIBRARY_PATH")) {
      std::stringstream ss(ld);
      for (std::string dir; std::getline(ss, dir, ':');)
        if (!dir.empty()) found.insert(dir);
    }
    return std::vector<std::string>(found.begin(), found.end());
  }();
  return dirs;
}

// The install prefixes of the C and C++ compilers that programs in the jail may start (Triton builds
// each kernel's launcher with $CC, else gcc or clang from PATH): an image whose toolchain lives
// outside /usr (CC=/opt/gcc/bin/gcc) needs its whole prefix (libexec, lib, include), read-only.
std::vector<std::string> toolchain_dirs() {
  static const std::vector<std::string> dirs = [] {
    std::set<std::string> found;
    std::vector<std::string> own;  // the trainer's home and working folder
    if (const char* home = std::getenv("HOME")) own.push_back(home);
    if (char* cwd = getcwd(nullptr, 0)) own.push_back(cwd), std::free(cwd);
    const auto add_prefix_of = [&](const std::string& program) {
      char* real = realpath(program.c_str(), nullptr);
      if (!real) return;
      std::string dir = std::string(real).substr(0, std::string(real).rfind('/'));
      std::free(real);
      // <prefix>/bin/gcc: the prefix holds the compiler's own libraries and helpers.
      if (dir.size() > 4 && dir.compare(dir.size() - 4, 4, "/bin") == 0) dir.resize(dir.size() - 4);
      // Never the trainer's home or working folder (or a folder above them): its runs and
      // checkpoints must stay out of the candidate's sight.
      for (const std::string& m : own)
        if (dir == "/" || m == dir || m.compare(0, dir.size() + 1, dir + "/") == 0) return;
      found.insert(dir);
    };
    for (const char* var : {"CC", "CXX"})
      if (const char* v = std::getenv(var); v && v[0] == '/') add_prefix_of(v);
    if (const char* path = std::getenv("PATH")) {
      std::stringstream ss(path);
      for (std::string dir; std::getline(ss, dir, ':');)
        for (const char* name : {"gcc", "cc", "clang"})
          if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) add_prefix_of(dir + "/" + name);
    }
    return std::vector<std::string>(found.begin(), found.end());
  }();
  return dirs;
}

// ---- after fork: async-signal-safe only ----------------------------------------------------

[[noreturn]] void die(const char* step) {
  const int err = errno;
  const char* name = strerrorname_np(err);
  const char* parts[] = {"turnrl sandbox: ", step, " failed: ", name ? name : "unknown error", "\n"};
  for (const char* p : parts) (void)!::write(2, p, strlen(p));
  _exit(126);
}

void format_fd_path(char* out, int fd) {
  const char prefix[] = "/proc/self/fd/";
  memcpy(out, prefix, sizeof prefix - 1);
  char digits[12];
  int n = 0;
  do digits[n++] = char('0' + fd % 10), fd /= 10;
  while (fd > 0);
  char* p = out + sizeof prefix - 1;
  while (n > 0) *p++ = digits[--n];
  *p = '\0';
}

// Copies a regular file of at most max_bytes (0 = any size); false when it is missing, not a
// regular file, too large or cannot be written.
bool copy_file(int from_dir, const char* from, int to_dir, const char* to, int64_t max_bytes) {
  const int in = ::openat(from_dir, from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return false;
  struct stat st {};
  if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode) || (max_bytes > 0 && st.st_size > max_bytes)) {
    ::close(in);
    return false;
  }
  const int out = ::openat(to_dir, to, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  bool ok = out >= 0;
  char buf[65536];
  for (ssize_t n; ok && (n = ::read(in, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0 && ::write(out, buf, size_t(n)) == n;
  }
  ::close(in);
  if (out >= 0) ::close(out);
  return ok;
}

// The namespace's init is a fork of the trainer, and /proc/1/cmdline is readable by anyone inside:
// the trainer's own command line (its config, run directory and paths) came back in a candidate's
// feedback. The init blanks it: its argument strings are its own stack memory (arg_start..arg_end,
// fields 48 and 49 of /proc/self/stat, read before the namespace's /proc replaces the host's).
// Raw system calls only: this runs in a fork of a process that may have threads.
void hide_command_line() {
  char buf[1024];
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return;
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  if (!p) return;
  unsigned long field[64] = {0};
  int k = 2;  // ") " ends field 2
  for (++p; *p && k < 50;) {
    while (*p == ' ') ++p;
    if (!*p) break;
    ++k;
    unsigned long v = 0;
    while (*p >= '0' && *p <= '9') v = v * 10 + unsigned(*p++ - '0');
    while (*p && *p != ' ') ++p;
    field[k] = v;
  }
  const unsigned long start = field[48], end = field[49];
  if (k < 49 || start == 0 || end <= start || end - start > (1ul << 20)) return;
  char* args = reinterpret_cast<char*>(start);
  std::memset(args, 0, end - start);
  static const char kName[] = "turnrl-sandbox-init";
  std::memcpy(args, kName, std::min(sizeof kName, size_t(end - start)) - 1);
}

void reset_signals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Dies the way status says the program died (or exits with its code).
[[noreturn]] void relay_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    signal(sig, SIG_DFL);
    kill(getpid(), sig);
    _exit(128 + sig);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 126);
}

void build_file_system(JailPlan& plan) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) die("making mounts private");
  if (mount("tmpfs", plan.root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, plan.tmpfs_options.c_str()) != 0)
    die("mounting the tmpfs root");
  for (const auto& d : plan.directories)
    if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) die("creating a mount point");
  for (const auto& f : plan.files) {
    const int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) die("creating a file mount point");
    ::close(fd);
  }
  for (const auto& l : plan.links)
    if (symlink(l.first.c_str(), l.second.c_str()) != 0 && errno != EEXIST) die("creating a link");
  for (auto& b : plan.binds) {
    if (mount(b.fd_path, b.target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) die("bind-mounting a path");
    if (b.device) continue;  // device files stay writable (/dev/null)
    const unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | b.keep_flags | (b.writable ? 0 : MS_RDONLY);
    if (mount(nullptr, b.target.c_str(), nullptr, flags, nullptr) != 0) die("remounting a path read-only");
  }
  if (mount("proc", plan.proc_target.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    die("mounting /proc");
  if (chdir(plan.root.c_str()) != 0) die("entering the new root");
  if (syscall(SYS_pivot_root, ".", ".") != 0) die("pivot_root");
  if (umount2(".", MNT_DETACH) != 0) die("detaching the host file system");
  if (chdir("/") != 0) die("chdir /");
  if (chmod("/tmp", 01777) != 0 || chmod("/dev/shm", 01777) != 0) die("chmod /tmp");
  if (sethostname("sandbox", 7) != 0) die("sethostname");
}

}  // namespace

std::vector<ViewedPath> read_only_view(const SandboxLimits& limits, const std::string& program) {
  std::vector<ViewedPath> view;
  for (const char* path : kSystemPaths) view.push_back({path, false});
  for (const auto& dir : library_dirs()) view.push_back({dir, false});
  for (const auto& dir : toolchain_dirs()) view.push_back({dir, false});
  for (const char* dev : kDevices) view.push_back({dev, true});
  for (const auto& dev : limits.devices) view.push_back({dev, true});
  view.push_back({program, false});
  for (const auto& path : limits.visible_paths) view.push_back({path, false});
  return view;
}

JailPlan plan_jail(const SandboxLimits& limits, const std::string& root, const std::string& program,
                   const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
  JailPlan plan;
  plan.root = root;
  plan.tmpfs_options = fmt::format("size={},mode=0755", std::max<int64_t>(limits.scratch_bytes, 1 << 20));
  // A root trainer maps root inside to itself (the jail's set-up needs to create files on the
  // tmpfs) and the program's uid 1000 to nobody; any other trainer can map only its own ids.
  plan.inside_root = geteuid() == 0;
  plan.uid_map = plan.inside_root ? fmt::format("0 0 1\n{} {} 1\n", kInsideId, kNobody)
                                  : fmt::format("{} {} 1\n", kInsideId, geteuid());
  plan.gid_map = plan.inside_root ? fmt::format("0 0 1\n{} {} 1\n", kInsideId, kNobody)
                                  : fmt::format("{} {} 1\n", kInsideId, getegid());
  plan.processes = limits.processes;
  plan.output_file_bytes = limits.file_bytes;
  Planner p{plan, {}, {}};
  for (const char* dir : {kSandboxWorkDir, "/tmp", "/dev", "/dev/shm", "/proc"})
    if (p.dirs_made.insert(dir).second) plan.directories.push_back(root + dir);
  for (const ViewedPath& v : read_only_view(limits, program)) p.add(v.path, false, v.device);
  for (const auto& path : limits.writable_paths) p.add(path, true, false);
  plan.proc_target = root + "/proc";
  plan.inputs = inputs;
  plan.outputs = outputs;
  for (const auto& n : inputs) plan.inside_inputs.push_back(std::string(kSandboxWorkDir) + "/" + n);
  for (const auto& n : outputs) plan.inside_outputs.push_back(std::string(kSandboxWorkDir) + "/" + n);
  // Writable paths are written by the sandbox's user: nobody, for a root trainer.
  for (const auto& path : limits.writable_paths)
    if (plan.inside_root && chown(path.c_str(), kNobody, kNobody) != 0)
      fail("sandbox: cannot hand the writable path {} to the sandbox's user (uid {}): {}", path, kNobody,
           std::strerror(errno));
  plan.filter = build_syscall_filter(FilterProfile::tool);
  if (pipe2(plan.ready_pipe, O_CLOEXEC) != 0 || pipe2(plan.go_pipe, O_CLOEXEC) != 0)
    fail("sandbox: pipe failed: {}", std::strerror(errno));
  return plan;
}

bool map_jail_identity(JailPlan& plan, pid_t child) {
  // The child's ends first: a child that died before it was ready must read as EOF here.
  ::close(plan.ready_pipe[1]), plan.ready_pipe[1] = -1;
  ::close(plan.go_pipe[0]), plan.go_pipe[0] = -1;
  char byte = 0;
  const bool ready = ::read(plan.ready_pipe[0], &byte, 1) == 1;
  bool ok = ready;
  auto write_proc = [&](const char* file, const std::string& text) {
    const std::string path = fmt::format("/proc/{}/{}", child, file);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ok = ok && fd >= 0 && ::write(fd, text.data(), text.size()) == ssize_t(text.size());
    if (fd >= 0) ::close(fd);
  };
  if (ready && !plan.inside_root) write_proc("setgroups", "deny");
  if (ready) write_proc("uid_map", plan.uid_map), write_proc("gid_map", plan.gid_map);
  if (ok) (void)!::write(plan.go_pipe[1], &byte, 1);  // else the child reads EOF and gives up
  for (int* pipe_pair : {plan.ready_pipe, plan.go_pipe})
    for (int k = 0; k < 2; ++k)
      if (pipe_pair[k] >= 0) ::close(pipe_pair[k]), pipe_pair[k] = -1;
  return ok;
}

void enter_jail(JailPlan& plan) {
  reset_signals();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0)
    die("unshare (user, mount, pid, network, IPC, UTS namespaces)");
  char byte = 1;
  if (::write(plan.ready_pipe[1], &byte, 1) != 1 || ::read(plan.go_pipe[0], &byte, 1) != 1)
    die("mapping the sandbox's user ids");
  // Opened inside the new mount namespace (bind sources must belong to it) with the trainer's file
  // identity, before the program's process switches to the sandbox's own.
  for (auto& b : plan.binds) {
    b.fd = ::open(b.source.c_str(), O_PATH | O_CLOEXEC);
    if (b.fd < 0) die("opening a visible path");
    format_fd_path(b.fd_path, b.fd);
  }
  const int exchange = ::open(plan.root.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC);
  if (exchange < 0) die("opening the sandbox directory");
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) die("pipe");
  const pid_t init = fork();
  if (init < 0) die("fork of the namespace's init");
  if (init > 0) {
    // Outside the pid namespace: wait for the init, then die as the program died.
    ::close(status_pipe[1]);
    int st = 0;
    while (waitpid(init, &st, 0) < 0 && errno == EINTR) {
    }
    int program_status = 0;
    if (::read(status_pipe[0], &program_status, sizeof program_status) != ssize_t(sizeof program_status)) relay_status(st);
    relay_status(program_status);
  }
  // Pid 1 of the new namespace: when it dies, the kernel kills every process inside.
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  hide_command_line();
  ::close(status_pipe[0]);
  build_file_system(plan);
  for (size_t i = 0; i < plan.inputs.size(); ++i)
    if (!copy_file(exchange, plan.inputs[i].c_str(), AT_FDCWD, plan.inside_inputs[i].c_str(), 0)) die("copying an input in");
  if (plan.inside_root)
    for (const char* dir : {kSandboxWorkDir, "/tmp", "/dev/shm"})
      if (chown(dir, kInsideId, kInsideId) != 0) die("handing /sandbox to the sandbox user");
  const pid_t program = fork();
  if (program < 0) die("fork of the program");
  if (program == 0) {
    ::close(exchange);
    ::close(status_pipe[1]);
    if (chdir(kSandboxWorkDir) != 0) die("chdir /sandbox");
    return;
  }
  int st = 0;
  for (;;) {  // as init, reap every orphan until the program itself ends
    const pid_t done = waitpid(-1, &st, 0);
    if (done == program) break;
    if (done < 0 && errno != EINTR) die("waiting for the program");
  }
  for (size_t i = 0; i < plan.outputs.size(); ++i)
    copy_file(AT_FDCWD, plan.inside_outputs[i].c_str(), exchange, plan.outputs[i].c_str(), plan.output_file_bytes);
  (void)!::write(status_pipe[1], &st, sizeof st);
  _exit(0);
}

void seal_jail(JailPlan& plan) {
  // Root inside the namespace is the trainer's uid outside: the program runs as uid 1000 (nobody
  // outside), with no supplementary groups and, after exec, no capabilities.
  if (plan.inside_root &&
      (setgroups(0, nullptr) != 0 || setresgid(kInsideId, kInsideId, kInsideId) != 0 ||
       setresuid(kInsideId, kInsideId, kInsideId) != 0))
    die("switching to the sandbox user");
  const rlimit nproc{rlim_t(plan.processes), rlim_t(plan.processes)};
  if (setrlimit(RLIMIT_NPROC, &nproc) != 0) die("setrlimit(RLIMIT_NPROC)");
  errno = install_syscall_filter(plan.filter);
  if (errno != 0) die("installing the seccomp filter");
}

}  // namespace turnrl::sandbox_detail
