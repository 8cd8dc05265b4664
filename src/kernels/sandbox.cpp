#include "turnrl/kernels/sandbox.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>

#include "code_sampler.h"
#include "namespace_jail.h"
#include "process_lockdown.h"
#include "turnrl/core/error.h"
#include "turnrl/core/install_paths.h"
#include "turnrl/core/filesystem.h"

namespace turnrl {
namespace {

// Frames: 8-byte little-endian length of (kind + body), one kind byte, the body.
constexpr char kHello = 'H', kReply = 'R', kOutOfMemory = 'M', kCallMark = 'T', kLibraryMark = 'L';
constexpr size_t kMaxCallMarks = 1 << 16;  // a request's marks: two per timed call
constexpr int kChannelFd = 3;
constexpr size_t kTailBytes = 2048;
constexpr const char* kCpuEnv = "TURNRL_SANDBOX_CPU_SECONDS";
// "required": confine_candidate() installs its seccomp filter or the worker exits (namespaces);
// "if-available": a CPU worker installs it where the kernel lets it, else says so and runs without
// (rlimits-only, where threads, forks and signals to other processes are refused only by it).
constexpr const char* kConfineEnv = "TURNRL_SANDBOX_CONFINE";
constexpr const char* kLockdownEnv = "TURNRL_SANDBOX_LOCKDOWN";  // set (workers): confine_candidate() locks down

std::string frame_header(char kind, size_t body_bytes) {
  std::string out(8, '\0');
  const uint64_t n = body_bytes + 1;
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  out += kind;
  return out;
}

std::string frame(char kind, const std::string& body) { return frame_header(kind, body.size()) + body; }

// Library marks as the parent reads them: 'L', the edge ('E' entry, 'X' exit), the routine's id,
// the worker thread's CPU clock in ns and CLOCK_MONOTONIC in ns (8 bytes each, little-endian), read
// by the worker's sealed code as it sends the mark. The monotonic times bound the routine calls in
// which the thread's sampled code is the served routine's (code samples carry the same clock). A routine call's time is the difference: nothing kept in the worker's memory
// between the edges, where code reached from inside the routine (a rewritten GOT slot of a library
// it calls) could change it. Complete pairs are summed by (marked call, routine); an edge out of
// order, or a clock that went back, is a malformed mark. No signal handler runs between a pair's
// edges (every signal is blocked there), so what the candidate can write on the channel itself only
// adds whole pairs or breaks the order: never a shorter or missing call.
class LibraryMarkReader {
 public:
  static constexpr size_t kFrameBytes = 19;

  // "" or why the mark is malformed. call: the marked call it falls in (-1: calls are not marked;
  // -2: between marked calls, not counted).
  std::string read(const std::string& f, int call) {
    if (f.size() != kFrameBytes) return fmt::format("a library mark of {} bytes ({} expected)", f.size(), kFrameBytes);
    const char edge = f[1];
    const int routine = int(uint8_t(f[2]));
    uint64_t ns = 0, mono_ns = 0;
    for (int i = 0; i < 8; ++i) ns |= uint64_t(uint8_t(f[size_t(3 + i)])) << (8 * i);
    for (int i = 0; i < 8; ++i) mono_ns |= uint64_t(uint8_t(f[size_t(11 + i)])) << (8 * i);
    if (edge == 'E') {
      if (open_) return fmt::format("a library call of routine {} entered inside one of routine {}", routine, routine_);
      open_ = true;
      routine_ = routine;
      call_ = call;
      entry_ns_ = ns;
      entry_mono_ns_ = mono_ns;
      return "";
    }
    if (edge != 'X') return fmt::format("a library mark with edge byte {}", int(uint8_t(edge)));
    if (!open_) return fmt::format("a library call of routine {} left without being entered", routine);
    if (routine != routine_) return fmt::format("routine {} left inside a call of routine {}", routine, routine_);
    if (ns < entry_ns_) return fmt::format("a call of routine {} whose CPU clock went back", routine);
    if (mono_ns < entry_mono_ns_) return fmt::format("a call of routine {} whose monotonic clock went back", routine);
    if (call == call_ && call != -2) {
      if (call >= 0) spans_.push_back({entry_mono_ns_, mono_ns});
      MarkedLibraryUse& u = uses_[{call, routine}];
      u.call = call;
      u.routine = routine;
      ++u.calls;
      u.cpu_seconds += 1e-9 * double(ns - entry_ns_);
    }
    open_ = false;
    return "";
  }
  bool open() const { return open_; }
  // The routine calls completed since the last take_spans(), [entry, exit] on CLOCK_MONOTONIC.
  std::vector<std::pair<uint64_t, uint64_t>> take_spans() { return std::exchange(spans_, {}); }
  std::vector<MarkedLibraryUse> uses() const {
    std::vector<MarkedLibraryUse> out;
    for (const auto& [key, use] : uses_) out.push_back(use);
    return out;
  }

 private:
  bool open_ = false;
  uint64_t entry_ns_ = 0, entry_mono_ns_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> spans_;
  int routine_ = 0;
  int call_ = -1;
  std::map<std::pair<int, int>, MarkedLibraryUse> uses_;
};

// The length a frame's 8-byte header declares (of what has arrived of it).
uint64_t declared_length(std::string_view buf) {
  uint64_t n = 0;
  for (int i = 0; i < 8 && size_t(i) < buf.size(); ++i) n |= uint64_t(uint8_t(buf[size_t(i)])) << (8 * i);
  return n;
}

// Length of the first complete frame in buf, or 0 when more bytes are needed.
size_t complete_frame(std::string_view buf) {
  if (buf.size() < 8) return 0;
  const uint64_t n = declared_length(buf);
  return buf.size() - 8 >= n ? size_t(8 + n) : 0;
}

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= size_t(w);
  }
  return true;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

enum class SendOutcome { sent, closed, timeout };

// write_all for the parent's end of the channel, which is non-blocking: a request larger than the
// socket buffer (a candidate's object with a 1 MiB table is) goes out as the worker reads it, until
// the deadline. (send's EAGAIN, read as a closed channel, once killed such a worker and reported
// it as out of memory.)
SendOutcome send_until(int fd, const char* data, size_t n, double deadline) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w > 0) {
      data += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return SendOutcome::closed;
    const double left = deadline - now_seconds();
    if (left <= 0) return SendOutcome::timeout;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, int(std::min(left * 1e3 + 1, 1e6))) < 0 && errno != EINTR) return SendOutcome::closed;
  }
  return SendOutcome::sent;
}

std::string signal_name(int sig) {
  const char* s = strsignal(sig);
  return fmt::format("signal {} ({})", sig, s ? s : "?");
}

}  // namespace

const char* to_string(SandboxStatus status) {
  switch (status) {
    case SandboxStatus::ok: return "ok";
    case SandboxStatus::crashed: return "crashed";
    case SandboxStatus::timeout: return "timeout";
    case SandboxStatus::memory: return "memory";
    case SandboxStatus::output_limit: return "output_limit";
    case SandboxStatus::start_failed: return "start_failed";
    case SandboxStatus::bad_frame: return "bad_frame";
  }
  return "?";
}

const char* to_string(SandboxIsolation isolation) {
  return isolation == SandboxIsolation::namespaces ? "namespaces" : "rlimits-only";
}

SandboxIsolation parse_sandbox_isolation(const std::string& name, const std::string& field) {
  if (name == "namespaces") return SandboxIsolation::namespaces;
  if (name == "rlimits-only") return SandboxIsolation::rlimits_only;
  fail("{}: '{}' is not allowed; allowed: namespaces, rlimits-only", field, name);
}

namespace sandbox_detail {
// A worker program's sampler (SandboxLimits::sample_period_ns) and the executable mappings it had
// when it said hello: its own code and every library it loaded at start-up, all sealed before its
// hello where the kernel has mseal (process_lockdown.h), so that no code run later can put another
// file under their names.
struct WorkerSampling {
  pid_t program = -1;
  ThreadSampler sampler;
  std::vector<CodeMapping> at_start;
  std::vector<CodeMapping> later;  // the maps as last read at a closing mark
  std::map<uint64_t, CodeMatch> matched;  // later mappings compared with the loaded object, by start
  int64_t period_ns = 0;  // the sampler's period now (SandboxWorker::sample_densely changes it)
  WorkerSampling(pid_t pid, int64_t period) : program(pid), sampler(pid, period), period_ns(period) {}
};

// Counts one marked call's samples by mapping, at its closing mark (the worker waits there, with
// what the call ran still mapped: it unloads the candidate after the request). A sample taken inside
// a served routine's call (routine_spans, from the library marks) is the routine's, whose time its
// marks already count: it is counted under kInsideServedRoutine, whatever code it landed in. The
// rest by start-up mappings' names; anything else by the maps read at a closing mark of this
// request, read again when an address is in none of them.
using SampleCounts = std::map<std::tuple<int, std::string, bool, CodeMatch>, int64_t>;

// A later mapping's bytes against the object the program loads (once per mapping and request).
CodeMatch match_loaded(WorkerSampling& s, const CodeMapping& m, const std::string& loaded_code) {
  if (loaded_code.empty()) return CodeMatch::unchecked;
  auto [it, fresh] = s.matched.try_emplace(m.start, CodeMatch::unchecked);
  if (fresh) {
    const std::optional<bool> same = mapping_holds_file(s.program, m, loaded_code);
    it->second = !same ? CodeMatch::unchecked : *same ? CodeMatch::loaded_object : CodeMatch::other;
  }
  return it->second;
}

void count_samples(WorkerSampling& s, int call, const std::vector<CodeSample>& samples,
                   const std::vector<std::pair<uint64_t, uint64_t>>& routine_spans, const std::string& loaded_code,
                   SampleCounts& counts) {
  bool read_now = false;  // once per call at most, however many addresses are in no mapping
  for (const CodeSample& sample : samples) {
    const bool inside = std::any_of(routine_spans.begin(), routine_spans.end(), [&](const auto& span) {
      return sample.time_ns >= span.first && sample.time_ns <= span.second;
    });
    if (inside) {
      ++counts[{call, kInsideServedRoutine, false, CodeMatch::unchecked}];
      continue;
    }
    if (const CodeMapping* m = mapping_at(s.at_start, sample.ip)) {
      ++counts[{call, m->name, false, CodeMatch::unchecked}];
      continue;
    }
    const CodeMapping* m = mapping_at(s.later, sample.ip);
    if (!m && !read_now) {
      s.later = read_code_mappings(s.program);
      read_now = true;
      m = mapping_at(s.later, sample.ip);
    }
    ++counts[{call, m ? m->name : "[unknown]", true, m ? match_loaded(s, *m, loaded_code) : CodeMatch::unchecked}];
  }
}
}  // namespace sandbox_detail

SandboxWorker::SandboxWorker(std::string program, std::vector<std::string> args, SandboxLimits limits)
    : program_(std::move(program)), args_(std::move(args)), limits_(limits) {}

SandboxWorker::~SandboxWorker() { stop(); }

namespace {

// Closes every fd from `first` on except keep_a and keep_b (async-signal-safe).
void close_fds_from(int first, int keep_a = -1, int keep_b = -1) {
  int keep[2] = {std::min(keep_a, keep_b), std::max(keep_a, keep_b)};
  for (int k : keep) {
    if (k < first) continue;
    for (int fd = first; fd < k; ++fd) ::close(fd);
    first = k + 1;
  }
#ifdef SYS_close_range
  if (syscall(SYS_close_range, first, ~0U, 0) == 0) return;
#endif
  for (int fd = first; fd < 65536; ++fd) ::close(fd);
}

// Forks and execs program in a sandbox (limits, fds, file system, environment as described in
// sandbox.h). out_fd becomes the child's stdout/stderr, channel_fd (if >= 0) its fd 3; `jail`
// (namespaces) or work_dir (rlimits_only) says where it runs. Returns the child's pid or -1.
pid_t spawn_sandboxed(const std::string& program_path, const std::vector<std::string>& args,
                      const SandboxLimits& limits, const std::string& work_dir, int out_fd, int channel_fd,
                      sandbox_detail::JailPlan* jail, int read_ruleset = -1) {
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const std::string home = jail ? std::string(kSandboxWorkDir) : work_dir;
  std::vector<std::string> env_strings = {
      // USER and LOGNAME: the sandbox's uid has no passwd entry, and tools that ask who runs them
      // (Python's getpass, torch's cache folders) read these first.
      "PATH=/usr/bin:/bin", "LANG=C", "LC_ALL=C", "HOME=" + home, "USER=sandbox", "LOGNAME=sandbox",
      "TMPDIR=" + (jail ? std::string("/tmp") : work_dir),
      "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1",
      fmt::format("{}={}", kCpuEnv, limits.cpu_seconds)};
  // Workers (a channel) lock themselves down before their first candidate (confine_candidate).
  if (jail) env_strings.push_back(std::string(kConfineEnv) + "=required");
  else if (channel_fd >= 0) env_strings.push_back(std::string(kConfineEnv) + "=if-available");
  if (channel_fd >= 0) env_strings.push_back(std::string(kLockdownEnv) + "=1");
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) env_strings.push_back(std::string("LD_LIBRARY_PATH=") + ld);
  for (const auto& e : limits.environment) env_strings.push_back(e);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string program = program_path;
  argv.push_back(program.data());
  std::vector<std::string> arg_copy = args;
  for (auto& a : arg_copy) argv.push_back(a.data());
  argv.push_back(nullptr);

  auto lim = [](rlim_t soft, rlim_t hard) { return rlimit{soft, hard}; };
  const rlimit as_limit = lim(rlim_t(limits.address_space_bytes), rlim_t(limits.address_space_bytes));
  const rlimit cpu_limit = lim(rlim_t(limits.startup_seconds + limits.cpu_seconds + 1), RLIM_INFINITY);
  const rlimit core_limit = lim(0, 0);
  const rlimit fsize_limit = lim(rlim_t(limits.file_bytes), rlim_t(limits.file_bytes));
  const rlimit nofile_limit = lim(rlim_t(limits.open_files), rlim_t(limits.open_files));
  const bool isolate = limits.isolate_network;
  const char* dir = work_dir.c_str();

  pid_t pid = fork();
  if (pid == 0) {
    // No PR_SET_PDEATHSIG: it fires when the forking *thread* exits, and pool threads are
    // short-lived. A worker exits when its channel closes (the parent died or stopped it).
    setpgid(0, 0);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    if (channel_fd >= 0) dup2(channel_fd, kChannelFd);
    const int first_closed = channel_fd >= 0 ? kChannelFd + 1 : 3;
    // The trainer's other fds (other workers' channels among them) must not stay open in the
    // jail's helper processes either: a worker's death is seen as EOF on its channel.
    if (jail) close_fds_from(first_closed, jail->ready_pipe[1], jail->go_pipe[0]);
    if (jail) sandbox_detail::enter_jail(*jail);  // returns in the program's process, in /sandbox
    else if (chdir(dir) != 0) _exit(126);
    if (read_ruleset >= 0 && sandbox_detail::restrict_to_ruleset(read_ruleset) != 0) _exit(126);
    close_fds_from(first_closed);
    setrlimit(RLIMIT_AS, &as_limit);
    setrlimit(RLIMIT_CPU, &cpu_limit);
    setrlimit(RLIMIT_CORE, &core_limit);
    setrlimit(RLIMIT_FSIZE, &fsize_limit);
    setrlimit(RLIMIT_NOFILE, &nofile_limit);
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (jail) sandbox_detail::seal_jail(*jail);
    else if (isolate) unshare(CLONE_NEWUSER | CLONE_NEWNET);  // best effort: no network where allowed
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  if (devnull >= 0) ::close(devnull);
  if (jail && pid > 0) sandbox_detail::map_jail_identity(*jail, pid);
  return pid;
}

// The jail for one spawn (namespaces), or none (rlimits_only).
std::unique_ptr<sandbox_detail::JailPlan> plan_for(const SandboxLimits& limits, const std::string& program,
                                                   const std::string& work_dir, const std::vector<std::string>& inputs,
                                                   const std::vector<std::string>& outputs) {
  if (limits.isolation != SandboxIsolation::namespaces) return nullptr;
  return std::make_unique<sandbox_detail::JailPlan>(sandbox_detail::plan_jail(limits, work_dir, program, inputs, outputs));
}

// Closes what the parent still holds of a plan (after a failed fork).
void release_plan(sandbox_detail::JailPlan* jail) {
  if (!jail) return;
  for (int* pipe_pair : {jail->ready_pipe, jail->go_pipe})
    for (int k = 0; k < 2; ++k)
      if (pipe_pair[k] >= 0) ::close(pipe_pair[k]), pipe_pair[k] = -1;
}

}  // namespace

namespace {
std::string temp_root() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}
}  // namespace

std::string make_private_dir(const std::string& prefix) {
  std::string templ = fmt::format("{}/{}-{}-XXXXXX", temp_root(), prefix, getpid());
  return mkdtemp(templ.data()) ? templ : std::string();
}

int remove_stale_private_dirs() {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(temp_root(), ec), end; !ec && it != end; it.increment(ec)) {
    // turnrl-<what>-<pid>-XXXXXX, as make_private_dir names them.
    const std::string name = it->path().filename().string();
    if (name.rfind("turnrl-", 0) != 0 || name.size() < 8 || name[name.size() - 7] != '-') continue;
    const size_t pid_end = name.size() - 7, pid_begin = name.rfind('-', pid_end - 1);
    if (pid_begin == std::string::npos || pid_begin + 1 >= pid_end) continue;
    const std::string pid_text = name.substr(pid_begin + 1, pid_end - pid_begin - 1);
    if (pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t owner = pid_t(std::stol(pid_text));
    if (owner == getpid() || kill(owner, 0) == 0 || errno != ESRCH) continue;
    std::error_code is_dir_ec;
    if (!fs::is_directory(it->symlink_status(is_dir_ec)) || is_dir_ec) continue;
    if (remove_tree(it->path().string())) ++removed;
  }
  return removed;
}

void remove_private_dir(const std::string& dir) {
  remove_tree(dir);
}

CommandResult run_sandboxed(const std::string& program, const std::vector<std::string>& args,
                            const SandboxLimits& limits, const std::string& work_dir,
                            const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
  CommandResult result;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    result.status = SandboxStatus::start_failed;
    result.message = "pipe failed";
    return result;
  }
  auto jail = plan_for(limits, program, work_dir, inputs, outputs);
  // Without namespaces a tool reads only what the jail would show it (and its directory), where the
  // kernel has Landlock: the compiler, asked to #include a host file, printed its first line.
  int read_ruleset = -1;
  if (!jail) {
    std::vector<std::string> readable, writable = limits.writable_paths;
    for (const auto& v : sandbox_detail::read_only_view(limits, program)) readable.push_back(v.path);
    writable.push_back(work_dir);
    read_ruleset = sandbox_detail::ruleset_confining_reads(readable, writable);
    if (read_ruleset < 0 && read_ruleset != -ENOSYS && read_ruleset != -EOPNOTSUPP) {
      ::close(out[0]), ::close(out[1]);
      result.status = SandboxStatus::start_failed;
      result.message = fmt::format("confining {}'s reads failed: {}", program, std::strerror(-read_ruleset));
      return result;
    }
  }
  const pid_t pid = spawn_sandboxed(program, args, limits, work_dir, out[1], -1, jail.get(), read_ruleset);
  if (read_ruleset >= 0) ::close(read_ruleset);
  release_plan(jail.get());
  ::close(out[1]);
  if (pid < 0) {
    ::close(out[0]);
    result.status = SandboxStatus::start_failed;
    result.message = "fork failed";
    return result;
  }
  const double deadline = now_seconds() + limits.wall_seconds;
  char chunk[65536];
  for (;;) {
    const double left = deadline - now_seconds();
    if (left <= 0) {
      result.status = SandboxStatus::timeout;
      result.message = fmt::format("wall-clock limit of {} s exceeded", limits.wall_seconds);
      break;
    }
    pollfd fd{out[0], POLLIN, 0};
    const int ready = poll(&fd, 1, int(left * 1000.0 + 1));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    ssize_t k = ::read(out[0], chunk, sizeof chunk);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    result.output.append(chunk, size_t(k));
    if (int64_t(result.output.size()) > limits.output_bytes) {
      result.output.resize(size_t(limits.output_bytes));
      result.status = SandboxStatus::output_limit;
      result.message = fmt::format("more than {} bytes of output", limits.output_bytes);
      break;
    }
  }
  ::close(out[0]);
  if (result.status != SandboxStatus::ok) kill(-pid, SIGKILL), kill(pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) result.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) result.signal = WTERMSIG(st);
  if (result.status == SandboxStatus::ok && result.signal != 0) {
    result.status = result.signal == SIGXCPU ? SandboxStatus::timeout : SandboxStatus::crashed;
    result.message = "killed by " + signal_name(result.signal);
  }
  return result;
}

bool SandboxWorker::start() {
  if (pid_ > 0) return true;
  work_dir_ = make_private_dir("turnrl-worker");
  if (work_dir_.empty()) return false;
  int sv[2], out[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return false;
  if (pipe2(out, O_CLOEXEC) != 0) {
    ::close(sv[0]);
    ::close(sv[1]);
    return false;
  }
  std::unique_ptr<sandbox_detail::JailPlan> jail;
  try {
    jail = plan_for(limits_, program_, work_dir_, {}, {});
  } catch (const Error& e) {
    output_tail_ = e.what();
    ::close(sv[0]), ::close(sv[1]), ::close(out[0]), ::close(out[1]);
    return false;
  }
  const pid_t pid = spawn_sandboxed(program_, args_, limits_, work_dir_, out[1], sv[1], jail.get());
  release_plan(jail.get());
  ::close(sv[1]);
  ::close(out[1]);
  channel_ = sv[0];
  output_ = out[0];
  if (pid < 0) {
    stop();
    return false;
  }
  fcntl(channel_, F_SETFL, fcntl(channel_, F_GETFL) | O_NONBLOCK);
  fcntl(output_, F_SETFL, fcntl(output_, F_GETFL) | O_NONBLOCK);
  pid_ = pid;
  ++starts_;
  calls_since_start_ = 0;
  std::string error;
  if (!wait_hello(&error)) {
    output_tail_ = error;
    stop();
    return false;
  }
  start_sampling();
  return true;
}

void SandboxWorker::start_sampling() {
  sampling_.reset();
  if (limits_.sample_period_ns <= 0) return;
  static std::once_flag said;
  const std::string& unavailable = sandbox_detail::code_sampling_unavailable();
  if (!unavailable.empty()) {
    std::call_once(said, [&] {
      std::fprintf(stderr, "turnrl sandbox: %s: candidate code is not sampled (library code reached outside the "
                           "served routines goes unseen; docs/evaluator.md)\n", unavailable.c_str());
    });
    return;
  }
  const pid_t program = program_pid();
  if (program <= 0) return;
  auto s = std::make_unique<sandbox_detail::WorkerSampling>(program, limits_.sample_period_ns);
  s->at_start = sandbox_detail::read_code_mappings(program);
  if (!s->sampler.ok() || s->at_start.empty()) {
    std::call_once(said, [&] {
      std::fprintf(stderr, "turnrl sandbox: %s: candidate code is not sampled (docs/evaluator.md)\n",
                   s->sampler.ok() ? "the worker's maps could not be read" : s->sampler.error().c_str());
    });
    return;
  }
  sampling_ = std::move(s);
}

void SandboxWorker::stop() {
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = program_pid_ = -1;
  sampling_.reset();
  if (channel_ >= 0) ::close(channel_);
  if (output_ >= 0) ::close(output_);
  channel_ = output_ = -1;
  remove_private_dir(work_dir_);
  work_dir_.clear();
}

namespace {

struct ProcessEntry {
  pid_t pid = 0, parent = 0;
  char state = 0;  // 'Z': exited, not yet reaped
};

// Every process in /proc with its parent (read once: the kernel here has no
// /proc/<pid>/task/<tid>/children).
std::vector<ProcessEntry> process_table() {
  std::vector<ProcessEntry> table;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    FILE* f = std::fopen(("/proc/" + name + "/stat").c_str(), "r");
    if (!f) continue;
    char buf[512];
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = 0;
    // pid (comm) state ppid ...: comm may hold spaces and parentheses, so parse after the last ')'.
    const char* close = std::strrchr(buf, ')');
    ProcessEntry e;
    int ppid = 0;
    if (!close || std::sscanf(close + 1, " %c %d", &e.state, &ppid) != 2) continue;
    e.pid = pid_t(std::stol(name));
    e.parent = pid_t(ppid);
    table.push_back(e);
  }
  return table;
}

// The first child of `parent` in `table`, -1 if none.
pid_t child_of(const std::vector<ProcessEntry>& table, pid_t parent) {
  for (const ProcessEntry& e : table)
    if (e.parent == parent) return e.pid;
  return -1;
}

}  // namespace

pid_t SandboxWorker::program_pid() {
  if (pid_ <= 0) return -1;
  if (program_pid_ > 0) return program_pid_;
  if (limits_.isolation != SandboxIsolation::namespaces) return program_pid_ = pid_;
  // pid_ waits for the namespace's init, which runs the program as its first child (namespace_jail.cpp).
  const std::vector<ProcessEntry> table = process_table();
  const pid_t init = child_of(table, pid_);
  const pid_t program = init > 0 ? child_of(table, init) : -1;
  return program > 0 ? (program_pid_ = program) : -1;
}

double SandboxWorker::billed_cpu_seconds() {
  clockid_t clock;
  timespec ts{};
  const pid_t pid = program_pid();
  if (pid <= 0 || clock_getcpuclockid(pid, &clock) != 0 || clock_gettime(clock, &ts) != 0) return std::nan("");
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int SandboxWorker::stray_processes() {
  const pid_t program = program_pid();
  if (program <= 0) return 0;
  // With namespaces, a process whose parent exits is adopted by the namespace's init (the
  // program's parent), so everything the program started, double forks included, is below it.
  const std::vector<ProcessEntry> table = process_table();
  const pid_t root = limits_.isolation == SandboxIsolation::namespaces ? child_of(table, pid_) : program;
  if (root <= 0) return 0;
  std::map<pid_t, pid_t> parent_of;
  for (const ProcessEntry& e : table) parent_of[e.pid] = e.parent;
  int stray = 0;
  for (const ProcessEntry& e : table) {
    if (e.pid == program || e.pid == root || e.state == 'Z') continue;
    // Up the parents to the root (a bounded walk: pids are not reused while this reads).
    pid_t p = e.parent;
    for (int depth = 0; p > 1 && p != root && depth < 64; ++depth) {
      const auto it = parent_of.find(p);
      p = it == parent_of.end() ? 0 : it->second;
    }
    stray += p == root;
  }
  return stray;
}

int SandboxWorker::thread_count() {
  const pid_t pid = program_pid();
  if (pid <= 0) return 0;
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it(fmt::format("/proc/{}/task", pid), ec), end; !ec && it != end;
       it.increment(ec))
    ++n;
  return n;
}

namespace {

// Waits for one frame on the channel while draining the output pipe. Returns "" with *why set on
// EOF ("eof"), deadline ("timeout"), output flood ("output") or a declared length over max_frame
// ("oversized": known from the first 8 bytes, so that a worker cannot make the parent hold gigabytes).
struct FrameWait {
  std::string frame;
  std::string why;
  size_t trailing = 0;  // bytes that had arrived after the frame (a second, unasked-for frame)
  uint64_t declared = 0;  // "oversized": the length the frame's header declared
};

// `buf` from `start` holds bytes read before (frames that arrived together) and keeps what follows
// the frame returned (trailing counts those bytes); `start` moves past each frame taken, so that
// many small frames read at once cost no copying of the rest.
FrameWait wait_frame(int channel, int output, double deadline, int64_t output_limit, int64_t max_frame,
                     std::string& tail, int64_t& output_bytes, std::string& buf, size_t& start) {
  char chunk[65536];
  bool channel_open = true;
  for (;;) {
    const std::string_view rest(buf.data() + start, buf.size() - start);
    if (rest.size() >= 8 && declared_length(rest) > uint64_t(std::max<int64_t>(max_frame, 1)) + 1)
      return {"", "oversized", 0, declared_length(rest)};
    if (size_t n = complete_frame(rest)) {
      FrameWait w{std::string(rest.substr(8, n - 8)), "", rest.size() - n};
      start += n;
      return w;
    }
    buf.erase(0, start);  // only a partial frame is left: a short move
    start = 0;
    if (!channel_open) return {"", "eof"};
    const double left = deadline - now_seconds();
    if (left <= 0) return {"", "timeout"};
    pollfd fds[2] = {{channel, POLLIN, 0}, {output, POLLIN, 0}};
    const int nfds = output >= 0 ? 2 : 1;
    int r = poll(fds, nfds, int(std::min(left * 1000.0 + 1, 1e9)));
    if (r < 0 && errno != EINTR) return {"", "eof"};
    if (nfds == 2 && (fds[1].revents & (POLLIN | POLLHUP))) {
      for (;;) {
        ssize_t k = ::read(output, chunk, sizeof chunk);
        if (k <= 0) break;
        output_bytes += k;
        tail.append(chunk, size_t(k));
        if (tail.size() > 2 * kTailBytes) tail.erase(0, tail.size() - kTailBytes);
        if (output_bytes > output_limit) return {"", "output"};
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      for (;;) {
        ssize_t k = ::read(channel, chunk, sizeof chunk);
        if (k > 0) {
          buf.append(chunk, size_t(k));
          continue;
        }
        if (k == 0) channel_open = false;
        break;
      }
    }
  }
}

std::string trim_tail(const std::string& tail) {
  return tail.size() > kTailBytes ? tail.substr(tail.size() - kTailBytes) : tail;
}

}  // namespace

bool SandboxWorker::wait_hello(std::string* error) {
  int64_t bytes = 0;
  output_tail_.clear();
  std::string buf;
  size_t start = 0;
  FrameWait w = wait_frame(channel_, output_, now_seconds() + limits_.startup_seconds, limits_.output_bytes,
                           limits_.reply_bytes, output_tail_, bytes, buf, start);
  if (!w.frame.empty() && w.frame[0] == kHello) return true;
  *error = fmt::format("worker {} did not start ({}): {}", program_, w.why.empty() ? "bad hello" : w.why,
                       trim_tail(output_tail_));
  return false;
}

SandboxReply SandboxWorker::fail_and_reap(SandboxStatus status, std::string message, const std::string& frame) {
  SandboxReply reply;
  reply.output_tail = trim_tail(output_tail_);
  if (pid_ > 0) {
    int st = 0;
    bool died_first = false;
    if (status == SandboxStatus::crashed) {
      // A worker whose channel closed is usually dying: what killed it is its own exit status. One
      // that lives on (or does not take its request) is killed here, and that SIGKILL is this
      // parent's, not a sign of memory.
      for (int tries = 0; tries < 20 && !died_first; ++tries) {
        pid_t gone = 0;
        while ((gone = waitpid(pid_, &st, WNOHANG)) < 0 && errno == EINTR) {
        }
        died_first = gone == pid_;
        if (!died_first) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    if (!died_first) {
      if (status != SandboxStatus::crashed) kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);  // also when it closed the channel but lives on
      while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
    }
    pid_ = -1;
    if (status == SandboxStatus::crashed) {
      if (WIFSIGNALED(st)) {
        reply.signal = WTERMSIG(st);
        if (reply.signal == SIGXCPU) status = SandboxStatus::timeout, message = "CPU time limit exceeded";
        else if (reply.signal == SIGXFSZ) status = SandboxStatus::output_limit, message = "file size limit exceeded";
        else if (!frame.empty() && frame[0] == kOutOfMemory)
          status = SandboxStatus::memory, message = fmt::format("address-space limit ({} MiB) exceeded, then {}",
                                                                limits_.address_space_bytes >> 20,
                                                                signal_name(reply.signal));
        else if (reply.signal != SIGKILL) message = "worker died of " + signal_name(reply.signal);
        else if (died_first) status = SandboxStatus::memory, message = "killed (SIGKILL: out of memory?)";
        // else the SIGKILL was this parent's, and the message already says why
      } else if (WIFEXITED(st)) {
        reply.exit_code = WEXITSTATUS(st);
        if (!frame.empty() && frame[0] == kOutOfMemory)
          status = SandboxStatus::memory,
          message = fmt::format("out of memory (address-space limit {} MiB)", limits_.address_space_bytes >> 20);
        else message = fmt::format("worker exited with status {} before replying", reply.exit_code);
      }
    }
  }
  stop();
  reply.status = status;
  reply.message = std::move(message);
  return reply;
}

SandboxReply SandboxWorker::call(const std::string& request, bool call_marks) {
  if (pid_ <= 0 && !start()) {
    SandboxReply r;
    r.status = SandboxStatus::start_failed;
    r.message = fmt::format("could not start worker {}", program_);
    r.output_tail = trim_tail(output_tail_);
    return r;
  }
  ++calls_since_start_;
  output_tail_.clear();
  const std::string f = frame(kReply, request);
  const double deadline = now_seconds() + limits_.wall_seconds;
  // The request and each call mark's acknowledgement go out on the non-blocking channel as the
  // worker reads them, by the deadline. A child that died makes send fail.
  const auto send_or_fail = [&](const char* data, size_t n) -> std::optional<SandboxReply> {
    switch (send_until(channel_, data, n, deadline)) {
      case SendOutcome::sent: return std::nullopt;
      case SendOutcome::closed: return fail_and_reap(SandboxStatus::crashed, "worker closed its channel", "");
      case SendOutcome::timeout: break;
    }
    return fail_and_reap(SandboxStatus::timeout,
                         fmt::format("the worker did not read its channel within the wall-clock limit of {} s",
                                     limits_.wall_seconds),
                         "");
  };
  if (auto failed = send_or_fail(f.data(), f.size())) return std::move(*failed);
  int64_t bytes = 0;
  std::vector<double> marks;
  LibraryMarkReader library;
  sandbox_detail::WorkerSampling* const sampled = call_marks ? sampling_.get() : nullptr;
  sandbox_detail::SampleCounts sample_counts;  // by (marked call, mapping, since start, match)
  std::vector<sandbox_detail::CodeSample> taken;
  int64_t samples_lost = 0;
  // The calls sampled at the dense period (sample_densely: this request's only, if it marks calls).
  std::vector<int> dense_asked, densely_sampled;
  const int64_t dense_period_ns = dense_period_ns_;
  if (call_marks) dense_asked.swap(dense_calls_);
  if (sampled) {  // a request that left a call open (tampering, reported as such) leaves no samples here
    std::vector<sandbox_detail::CodeSample> stale;
    sampled->sampler.disable();
    sampled->sampler.drain(stale);
    sampled->later.clear();  // read again in this request: what an earlier one mapped may be gone
    sampled->matched.clear();
  }
  std::string pending;  // bytes that came after a library mark (the worker does not wait after one)
  size_t pending_start = 0;
  FrameWait w;
  for (;;) {
    w = wait_frame(channel_, output_, deadline, limits_.output_bytes, limits_.reply_bytes, output_tail_, bytes,
                   pending, pending_start);
    if (!w.why.empty() || w.frame.empty()) break;
    const char kind = w.frame[0];
    if (kind != kLibraryMark && !(call_marks && kind == kCallMark)) break;
    // The marked call a library mark falls in: after an odd number of call marks (-1, every call,
    // when none are taken).
    const int call = !call_marks ? -1 : marks.size() % 2 == 1 ? int(marks.size() / 2) : -2;
    if (kind == kLibraryMark) {
      const std::string why = library.read(w.frame, call);
      if (!why.empty()) return fail_and_reap(SandboxStatus::bad_frame, why, "");
      continue;
    }
    // After a call mark the worker waits for the acknowledgement, so nothing it wrote can follow it yet.
    const bool followed = w.trailing != 0;
    if (w.frame.size() != 1 || followed || marks.size() >= kMaxCallMarks)
      return fail_and_reap(SandboxStatus::bad_frame,
                           fmt::format("a call mark {} (call mark {})",
                                       w.frame.size() != 1 ? "with a body" : followed ? "followed by more bytes"
                                                                                      : "over the limit",
                                       marks.size() + 1),
                           "");
    if (library.open())
      return fail_and_reap(SandboxStatus::bad_frame, "a call mark inside a library routine call", "");
    marks.push_back(billed_cpu_seconds());
    // The thread is sampled from the opening mark's acknowledgement to the closing mark: both
    // switches happen while the worker waits here.
    if (sampled && marks.size() % 2 == 1) {
      library.take_spans();
      // The call's period, set while the program waits (it cannot see which). A period the kernel
      // refused to change stays, and the calls are listed by the period they were sampled at.
      const int call = int(marks.size() / 2);
      const bool dense = dense_period_ns > 0 && std::find(dense_asked.begin(), dense_asked.end(), call) != dense_asked.end();
      const int64_t want = dense ? dense_period_ns : limits_.sample_period_ns;
      if (want != sampled->period_ns && sampled->sampler.set_period(want)) sampled->period_ns = want;
      if (dense_period_ns > 0 && sampled->period_ns == dense_period_ns && dense_period_ns != limits_.sample_period_ns)
        densely_sampled.push_back(call);
      sampled->sampler.enable();
    } else if (sampled) {
      sampled->sampler.disable();
      taken.clear();
      samples_lost += sampled->sampler.drain(taken);
      // Every library mark of the call came before its closing mark on the channel.
      sandbox_detail::count_samples(*sampled, int(marks.size() / 2 - 1), taken, library.take_spans(), loaded_code_,
                                    sample_counts);
    }
    if (auto failed = send_or_fail(&kind, 1)) return std::move(*failed);
  }
  if (w.why == "oversized")
    return fail_and_reap(SandboxStatus::bad_frame,
                         fmt::format("the worker declared a frame of {} bytes, over the limit of {} "
                                     "(SandboxLimits::reply_bytes)", w.declared, limits_.reply_bytes),
                         "");
  if (w.why == "timeout")
    return fail_and_reap(SandboxStatus::timeout, fmt::format("wall-clock limit of {} s exceeded", limits_.wall_seconds), "");
  if (w.why == "output")
    return fail_and_reap(SandboxStatus::output_limit,
                         fmt::format("more than {} bytes written to stdout/stderr", limits_.output_bytes), "");
  if (w.why.empty() && !w.frame.empty() && w.frame[0] != kReply && w.frame[0] != kOutOfMemory)
    return fail_and_reap(SandboxStatus::bad_frame,
                         fmt::format("the worker sent a frame of kind {} that is not a reply", int(uint8_t(w.frame[0]))),
                         w.frame);
  if (w.why == "eof" || w.frame.empty() || w.frame[0] != kReply)
    return fail_and_reap(SandboxStatus::crashed, "worker died", w.frame);
  SandboxReply reply;
  reply.payload = w.frame.substr(1);
  reply.trailing_bytes = w.trailing;
  reply.call_marks = std::move(marks);
  if (library.open())
    return fail_and_reap(SandboxStatus::bad_frame, "a library routine call was entered and never left", "");
  reply.library_uses = library.uses();
  if (sampled) {
    for (const auto& [key, n] : sample_counts)
      reply.code_samples.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key), n});
    reply.sample_period_seconds = 1e-9 * double(limits_.sample_period_ns);
    reply.densely_sampled_calls = std::move(densely_sampled);
    reply.dense_sample_period_seconds = 1e-9 * double(dense_period_ns);
    reply.samples_lost = samples_lost;
  }
  reply.output_tail = trim_tail(output_tail_);
  return reply;
}

void require_sandbox(const SandboxLimits& limits, const std::string& config_key) {
  if (limits.isolation != SandboxIsolation::namespaces) return;
  static const std::string why_not = [] {
    const std::string dir = make_private_dir("turnrl-probe");
    if (dir.empty()) return fmt::format("cannot create a directory under {}", temp_root());
    CommandResult r;
    try {
      r = run_sandboxed("/usr/bin/true", {}, SandboxLimits{}.wall(30), dir);
    } catch (const Error& e) {
      r.status = SandboxStatus::start_failed;
      r.message = e.what();
    }
    remove_private_dir(dir);
    if (r.status == SandboxStatus::ok && r.exit_code == 0) return std::string();
    std::string out = r.output.empty() ? r.message : r.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out.empty() ? fmt::format("a sandboxed /usr/bin/true exited with {}", r.exit_code) : out;
  }();
  if (!why_not.empty())
    fail("{}: 'namespaces' sandbox unavailable on this machine ({}); it needs unprivileged or root user "
         "namespaces with mount, pid and network namespaces and seccomp. Set {}: rlimits-only to run "
         "candidates with limits only: they can then read and write what the trainer can (docs/evaluator.md)",
         config_key, why_not, config_key);
}

std::string find_helper_program(const std::string& name) { return find_turnrl_file(TurnrlFiles::helpers, name); }

namespace sandbox_child {
namespace {
int64_t g_as_limit = 0;
int64_t g_as_at_hello = 0;  // address space after start-up (libraries mapped), before any request
char g_altstack[1 << 16];

// Address-space size in bytes from /proc/self/statm; async-signal-safe (open/read only).
int64_t address_space_now() {
  int fd = ::open("/proc/self/statm", O_RDONLY);
  if (fd < 0) return 0;
  char buf[64];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  int64_t pages = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) pages = pages * 10 + (buf[i] - '0');
  return pages * int64_t(sysconf(_SC_PAGESIZE));
}

void send_kind(char kind) {
  char f[9] = {1, 0, 0, 0, 0, 0, 0, 0, kind};
  (void)!::write(kChannelFd, f, sizeof f);
}

void on_crash(int sig) {
  // A failed allocation near the address-space limit shows up as a null dereference or an abort.
  // "Near" is measured in what requests may use: on a machine whose LibTorch maps CUDA libraries,
  // start-up alone takes most of a few-GiB limit.
  const int64_t base = std::min(g_as_at_hello, g_as_limit);
  if (g_as_limit > 0 && address_space_now() > base + (g_as_limit - base) / 4 * 3) send_kind(kOutOfMemory);
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

void install_crash_reporter() {
  rlimit r{};
  if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY) g_as_limit = int64_t(r.rlim_cur);
  stack_t ss{};
  ss.ss_sp = g_altstack;
  ss.ss_size = sizeof g_altstack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_crash;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void say_hello() {
  g_as_at_hello = address_space_now();
  const std::string f = frame(kHello, "");
  write_all(kChannelFd, f.data(), f.size());
}

bool read_request(std::string& request) {
  std::string buf;
  char chunk[65536];
  for (;;) {
    if (size_t n = complete_frame(buf)) {
      request = buf.substr(9, n - 9);
      return true;
    }
    ssize_t k = ::read(kChannelFd, chunk, sizeof chunk);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    buf.append(chunk, size_t(k));
  }
}

namespace {

// One mark frame of `kind` and its acknowledgement. The frame is built once: it lies inside what
// the marks enclose.
bool send_mark(const std::string& f) {
  if (!write_all(kChannelFd, f.data(), f.size())) return false;
  char ack = 0;
  for (;;) {
    const ssize_t k = ::read(kChannelFd, &ack, 1);
    if (k < 0 && errno == EINTR) continue;
    return k == 1 && ack == f.back();
  }
}

}  // namespace

bool mark_call() {
  static const std::string f = frame(kCallMark, "");
  return send_mark(f);
}

namespace {

bool send_library_mark(char edge, int routine) {
  // The clock and the frame on this sealed function's stack, written at once: nothing the candidate
  // can reach lies between the read and the write (no candidate code runs meanwhile).
  // At an entry the monotonic clock is read last and at an exit first, so that the span it bounds
  // holds no code but the routine's and the marks' own.
  timespec ts{}, mono{};
  if (edge == 'X') clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  if (edge != 'X') clock_gettime(CLOCK_MONOTONIC, &mono);
  const uint64_t ns = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  const uint64_t mono_ns = uint64_t(mono.tv_sec) * 1000000000ull + uint64_t(mono.tv_nsec);
  char f[8 + LibraryMarkReader::kFrameBytes] = {char(LibraryMarkReader::kFrameBytes)};
  f[8] = kLibraryMark;
  f[9] = edge;
  f[10] = char(uint8_t(routine));
  for (int i = 0; i < 8; ++i) f[11 + i] = char((ns >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) f[19 + i] = char((mono_ns >> (8 * i)) & 0xff);
  return write_all(kChannelFd, f, sizeof f);
}

}  // namespace

// Not acknowledged: a round trip at each edge would add the parent's wake-up to every library
// call, inside the candidate's timed calls (tens of us each, per row for a row-wise routine).
bool mark_library_entry(int routine) { return send_library_mark('E', routine); }
bool mark_library_exit(int routine) { return send_library_mark('X', routine); }

void write_reply(const std::string& reply) {
  // The frame's header, then the body where it lies: a copy of a large reply (every timed call's
  // outputs) would be heap the worker faults in while it is billed.
  const std::string header = frame_header(kReply, reply.size());
  if (!write_all(kChannelFd, header.data(), header.size()) || !write_all(kChannelFd, reply.data(), reply.size()))
    _exit(3);
}

void confine_candidate(bool gpu_driver) {
  // The lockdown (every worker, with or without namespaces) and then the candidate seccomp profile
  // (workers in namespaces). The worker's own code (the marks, the clock reads, the reply) shares the
  // candidate's address space: it is sealed with the vDSO, the writable GOT slots of its libraries
  // are guarded, and nothing outside the worker's directory (its cwd) can be written, /proc/self/mem
  // included. Kernels without Landlock or mseal run without those parts (process_lockdown.h).
  if (std::getenv(kLockdownEnv)) {
    if (!gpu_driver) sandbox_detail::guard_library_gots();  // checked after each call (cpu_worker.cpp)
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd)) {
      // The GPU driver opens its device nodes for writing when it needs one later (a new stream,
      // unified memory): /dev stays writable there.
      std::vector<std::string> writable = {cwd};
      if (gpu_driver) writable.push_back("/dev");
      const int err = sandbox_detail::confine_writes_beneath(writable);
      if (err && err != ENOSYS && err != EOPNOTSUPP) {
        std::fprintf(stderr, "turnrl sandbox: confining the worker's writes failed: %s\n", std::strerror(err));
        _exit(126);
      }
    }
    sandbox_detail::seal_code(gpu_driver ? sandbox_detail::SealScope::own_executable
                                         : sandbox_detail::SealScope::all_read_only_files);
  }
  const char* confine = std::getenv(kConfineEnv);
  if (!confine) return;
  // Without namespaces the profile is stacked on nothing, and a GPU worker's has only been run in
  // them: rlimits-only confines CPU workers, best effort.
  const bool required = std::string(confine) == "required";
  if (!required && gpu_driver) return;
  try {
    sandbox_detail::SyscallFilter filter = sandbox_detail::build_syscall_filter(
        // A CPU candidate is timed against a single-threaded reference: a thread of its own (started
        // through glibc's exported __clone, which no import check names) is refused here.
        gpu_driver ? sandbox_detail::FilterProfile::gpu_candidate : sandbox_detail::FilterProfile::native_candidate,
        getpid(),
        kChannelFd);
    if (const int err = sandbox_detail::install_syscall_filter(filter)) {
      std::fprintf(stderr, "turnrl sandbox: installing the candidate seccomp filter failed: %s%s\n", std::strerror(err),
                   required ? "" : " (rlimits-only: the candidate runs without it)");
      if (required) _exit(126);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    if (required) _exit(126);
  }
}

bool library_gots_rewritten() { return sandbox_detail::library_gots_rewritten(); }

void arm_cpu_limit() {
  const char* s = std::getenv(kCpuEnv);
  const double per_call = s ? std::atof(s) : 20.0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double used = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                      1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  rlimit r{};
  getrlimit(RLIMIT_CPU, &r);
  r.rlim_cur = rlim_t(used + per_call + 1);
  if (r.rlim_max != RLIM_INFINITY && r.rlim_cur > r.rlim_max) r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_CPU, &r);
}

namespace {

// What a candidate's load-time code (its constructors, run inside dlopen while its file still
// exists) could keep to change its code later: another descriptor of the file (written through, a
// private mapping that was never written shows the change), a second name for it (a hard link, a
// rename). "" when none, else what was found. keep: the worker's own read-only descriptor.
std::string kept_hold_of_object(const std::string& path, int keep) {
  struct stat kept {}, named {};
  if (fstat(keep, &kept) != 0) return "the loaded object's file could not be checked";
  if (kept.st_nlink != 1) return fmt::format("the loaded object's file has {} names", kept.st_nlink);
  if (stat(path.c_str(), &named) != 0 || named.st_dev != kept.st_dev || named.st_ino != kept.st_ino)
    return "the loaded object's file was renamed or replaced while it loaded";
  DIR* fds = opendir("/proc/self/fd");
  if (!fds) return "the process's descriptors could not be listed";
  std::string found;
  while (dirent* e = readdir(fds)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == keep || fd == dirfd(fds)) continue;
    struct stat st {};
    if (fstat(fd, &st) == 0 && st.st_dev == kept.st_dev && st.st_ino == kept.st_ino) {
      found = fmt::format("the loaded object's load-time code kept its file open (descriptor {})", fd);
      break;
    }
  }
  closedir(fds);
  return found;
}

}  // namespace

void* load_shared_object(const std::string& bytes, std::string& why) {
  static int loads = 0;
  const std::string name = fmt::format("candidate-{}.so", ++loads);
  const std::string path = "./" + name;
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    if (!f) {
      why = fmt::format("cannot write the candidate's object ({} bytes) into the worker's directory", bytes.size());
      std::remove(path.c_str());
      return nullptr;
    }
  }
  const int keep = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) why = dlerror();
  // Its code is fixed from here on: nothing of the file kept to write it through, and every mapping
  // of it that is not writable sealed (process_lockdown.h), so that the code the parent samples and
  // compares byte for byte with the object (SandboxWorker::expect_loaded_code) is the code that ran.
  std::string held = handle && keep >= 0 ? kept_hold_of_object(path, keep) : "";
  char cwd[4096];
  if (handle && held.empty() && getcwd(cwd, sizeof cwd)) {
    std::string seal_why;
    const int err = sandbox_detail::seal_loaded_object(std::string(cwd) + "/" + name, seal_why);
    if (err && err != ENOSYS) held = seal_why;
  }
  std::remove(path.c_str());
  if (keep >= 0) ::close(keep);
  if (!held.empty()) {
    why = "refused: " + held;
    return nullptr;  // not dlclose'd: that would run the object's destructors
  }
  return handle;
}

void report_out_of_memory() {
  send_kind(kOutOfMemory);
  _exit(4);
}

}  // namespace sandbox_child
}  // namespace turnrl
