#pragma once
// Sandboxed worker processes for running untrusted candidates.
//
// A SandboxWorker is one child process started with fork+exec of a small worker program (never a
// fork of the trainer). Parent and child talk over one socketpair (fd 3 in the child) with
// length-prefixed frames; the child's stdout/stderr go to a pipe that the parent drains and
// counts. The child runs with an address-space limit, a CPU-time limit re-armed per call, no core
// dumps, a file-size limit, only fds 0-3 open, no-new-privs, its own process group and a
// restricted environment. A call that crashes, hangs, floods its output or runs out of memory
// costs that call only: the reply says which, the child is killed, and the next call starts a
// fresh one.
//
// Isolation (SandboxIsolation::namespaces, the default): the child is pid 2 of its own pid
// namespace under a small init (when that init dies, every process the child started dies with
// it), in its own user namespace (uid 1000 inside, mapped to the trainer's uid, or to nobody when
// the trainer is root), mount namespace, network, IPC and UTS namespaces. Its file system is a
// size-limited tmpfs holding read-only bind mounts of /usr (with /bin, /lib... links), the dynamic
// loader's cache, a few device files, the directories of the trainer's own shared libraries (LibTorch
// wherever it is installed), the program and the paths a backend lists; everything else
// of the host (home directories, /tmp, checkpoints, the compile cache's logs, /etc) is absent. Its
// working directory /sandbox and /tmp are on that tmpfs. A seccomp filter refuses ptrace, mount,
// namespace and kernel-administration calls (syscall_filter.h); workers that run candidate code add
// a stricter one (sandbox_child::confine_candidate). SandboxIsolation::rlimits_only is the weaker
// mode for machines without user namespaces: limits, a private directory and the environment only
// (docs/evaluator.md says what it leaves open); a config must ask for it (evaluator.sandbox).
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace turnrl {
namespace sandbox_detail {
struct WorkerSampling;
}

// How a sandboxed process is isolated from the host (the `evaluator.sandbox` config key).
enum class SandboxIsolation {
  namespaces,    // user, mount, pid, network, IPC, UTS namespaces, tmpfs root, seccomp (see above)
  rlimits_only,  // resource limits, private directory, environment: sees and writes what the trainer can
};
const char* to_string(SandboxIsolation isolation);
// "namespaces" | "rlimits-only"; throws turnrl::Error naming `field` otherwise.
SandboxIsolation parse_sandbox_isolation(const std::string& name, const std::string& field);

// Per-worker limits; chainable setters in the style of LibTorch options.
struct SandboxLimits {
  double wall_seconds = 20;                 // per call, enforced by the parent (SIGKILL)
  double cpu_seconds = 20;                  // per call, RLIMIT_CPU re-armed by the child
  double startup_seconds = 60;              // exec + library load of a fresh worker
  int64_t address_space_bytes = int64_t(4) << 30;  // RLIMIT_AS
  int64_t output_bytes = int64_t(1) << 20;  // stdout+stderr per call
  int64_t file_bytes = int64_t(16) << 20;   // RLIMIT_FSIZE
  int64_t reply_bytes = int64_t(1) << 30;   // largest frame read from the worker: a longer declared
                                            // length is a bad frame, read no further (the parent's memory)
  int open_files = 256;                     // RLIMIT_NOFILE
  bool isolate_network = true;              // rlimits_only: best effort unshare(CLONE_NEWUSER | CLONE_NEWNET)
  std::vector<std::string> environment;     // extra "NAME=value" entries (e.g. CUDA_VISIBLE_DEVICES)
  SandboxIsolation isolation = SandboxIsolation::namespaces;
  int64_t scratch_bytes = int64_t(64) << 20;  // namespaces: size of the tmpfs (/, /sandbox, /tmp)
  int processes = 256;                      // namespaces: RLIMIT_NPROC, counted inside the user namespace
  std::vector<std::string> visible_paths;   // namespaces: host paths mounted read-only at the same place
  std::vector<std::string> writable_paths;  // namespaces: host paths mounted read-write (shared caches);
                                            // a root trainer hands them to nobody, the sandbox's user
  std::vector<std::string> devices;         // namespaces: device files beyond null, zero, full, (u)random
  // > 0: in calls with call marks, the program's thread is sampled from outside between each marked
  // call's two marks, one user-space instruction pointer every this many ns of its CPU time
  // (SandboxReply::code_samples; perf_event_open: where it is unavailable, calls run unsampled).
  int64_t sample_period_ns = 0;

  SandboxLimits& wall(double s) { wall_seconds = s; return *this; }
  SandboxLimits& cpu(double s) { cpu_seconds = s; return *this; }
  SandboxLimits& address_space(int64_t bytes) { address_space_bytes = bytes; return *this; }
  SandboxLimits& output(int64_t bytes) { output_bytes = bytes; return *this; }
  SandboxLimits& isolate(SandboxIsolation i) { isolation = i; return *this; }
  SandboxLimits& scratch(int64_t bytes) { scratch_bytes = bytes; return *this; }
  SandboxLimits& visible(const std::string& path) { visible_paths.push_back(path); return *this; }
  SandboxLimits& writable(const std::string& path) { writable_paths.push_back(path); return *this; }
  SandboxLimits& sample_code(int64_t period_ns) { sample_period_ns = period_ns; return *this; }
};

enum class SandboxStatus {
  ok,            // the child replied
  crashed,       // the child died (signal or exit) before replying
  timeout,       // wall-clock deadline or CPU limit (SIGXCPU)
  memory,        // address-space limit hit (reported by the child's crash handler) or OOM-killed
  output_limit,  // stdout+stderr over the limit, or the file-size limit (SIGXFSZ)
  start_failed,  // the worker program could not be started
  bad_frame,     // the child sent a frame that is not a reply (its channel carried something unasked
                 // for, e.g. a forged length); it was killed
};
const char* to_string(SandboxStatus status);

// Library routine calls marked from inside one marked call (SandboxReply::library_uses).
struct MarkedLibraryUse {
  int call = -1;            // the marked call they were inside (-1: calls were not marked)
  int routine = 0;          // the id the worker marked them with
  int64_t calls = 0;        // complete entry/exit pairs
  double cpu_seconds = 0;   // the worker thread's CPU clock from entry to exit, summed over the pairs
};

// CodeSamples::mapping of the samples taken inside a library routine call the program marked
// (sandbox_child::mark_library_entry/exit; the marks carry the monotonic clock, and so do samples):
// that time is the routine's, counted by its marks, whatever code the samples landed in.
inline constexpr const char* kInsideServedRoutine = "[inside a marked routine call]";

// Whether a mapping made after start-up holds the bytes of the object the program was told it
// loads (SandboxWorker::expect_loaded_code), read from the program's memory by the parent.
enum class CodeMatch {
  unchecked,      // no object expected, a start-up mapping, or the memory could not be read
  loaded_object,  // the object's bytes at the mapping's file offset
  other,          // other bytes: code the object's name does not cover
};

// Where the program's thread ran during one marked call, sampled from outside the program
// (SandboxLimits::sample_period_ns): samples whose instruction pointer lay in one executable mapping.
struct CodeSamples {
  int call = 0;              // the marked call
  std::string mapping;       // the mapping's path as /proc/<pid>/maps names it (" (deleted)" once its
                             // file is removed), "[vdso]", "[anon]" (anonymous memory), "[unknown]"
                             // (no executable mapping held that address at the call's closing mark),
                             // or kInsideServedRoutine
  bool since_start = false;  // not one of the mappings the program had when it said hello: mapped
                             // later (a loaded object, memory mapped by the code that ran), and named
                             // by the maps read at a closing mark (while the program waits there)
  CodeMatch match = CodeMatch::unchecked;  // mappings made after start-up
  int64_t samples = 0;
};

struct SandboxReply {
  SandboxStatus status = SandboxStatus::ok;
  std::string payload;      // the child's reply frame (status ok)
  int signal = 0;           // terminating signal, when the child died of one
  int exit_code = -1;       // exit status, when it exited
  std::string output_tail;  // last bytes the child wrote to stdout/stderr during the call
  std::string message;      // human-readable cause for every status but ok
  size_t trailing_bytes = 0;  // status ok: bytes that followed the reply frame on the channel,
                              // something the worker was not asked for (a forged or stray frame)
  // The worker's CPU time (billed_cpu_seconds) read here at each call mark it sent during the
  // request (sandbox_child::mark_call), while it waited for the mark's acknowledgement.
  std::vector<double> call_marks;
  // Library marks (sandbox_child::mark_library_entry/exit: the edges of each call of a library
  // routine the worker serves its candidate, with the routine's id and the thread's CPU clock as the
  // worker's sealed code read it at each edge), taken in every call, summed by (marked call, routine). With call_marks, only routine calls inside the marked calls
  // count (call: the index of the marked call); without, all do (call -1). An edge out of order (an
  // entry inside an entry, an exit of another routine, an entry never left) is a bad frame.
  std::vector<MarkedLibraryUse> library_uses;
  // With call marks and SandboxLimits::sample_period_ns, where the thread ran between each call's
  // marks (the event is enabled at a call's opening mark and disabled at its closing mark, both
  // before the worker is acknowledged, so no harness work between calls is sampled), by call and
  // mapping; the period in seconds (0: not sampled) and the samples the kernel dropped (ring full).
  std::vector<CodeSamples> code_samples;
  double sample_period_seconds = 0;
  int64_t samples_lost = 0;
  // The marked calls sampled every dense_sample_period_seconds instead (SandboxWorker::sample_densely),
  // in order; their CodeSamples are counted at that period.
  std::vector<int> densely_sampled_calls;
  double dense_sample_period_seconds = 0;
};

// One sandboxed child process, started lazily and restarted after any failed call.
// Not thread-safe: one caller at a time (a pool gives each thread its own worker).
class SandboxWorker {
 public:
  SandboxWorker(std::string program, std::vector<std::string> args, SandboxLimits limits = {});
  ~SandboxWorker();
  SandboxWorker(const SandboxWorker&) = delete;
  SandboxWorker& operator=(const SandboxWorker&) = delete;

  // Sends one request frame and waits for the reply under the limits. With call_marks, the worker's
  // call marks (sandbox_child::mark_call) are acknowledged and timed on the way; without, a mark is
  // a frame that is not a reply (bad_frame). Library marks are counted and timed in every call.
  SandboxReply call(const std::string& request, bool call_marks = false);
  // Starts the child now (call() does it when needed); false if it could not be started.
  bool start();
  // Kills the child and removes its working directory.
  void stop();

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& work_dir() const { return work_dir_; }
  int starts() const { return starts_; }  // how many children this worker has started
  int calls_since_start() const { return calls_since_start_; }
  const SandboxLimits& limits() const { return limits_; }
  // The process that runs the program (with namespaces pid() is the waiter outside the pid
  // namespace, and the program is its init's child), -1 when not running or not found.
  pid_t program_pid();
  // CPU time the kernel has billed the program's process (all its threads, live and exited), in
  // seconds, read from outside it (clock_getcpuclockid), so that nothing the program does can
  // rewrite it; NaN when it cannot be read.
  double billed_cpu_seconds();
  // Threads of the program's process (/proc/<pid>/task), 0 when it cannot be read.
  int thread_count();
  // Live processes the program started and left running (its descendants; with namespaces also
  // those adopted by the sandbox's init, so double forks count), read from /proc outside it; 0
  // when not running. With rlimits-only a process that left the program's descendants (a double
  // fork) is not found.
  int stray_processes();
  // Whether calls with call marks are sampled (SandboxLimits::sample_period_ns, perf_event_open
  // available and allowed on this worker's program); false before the first start.
  bool sampling() const { return sampling_ != nullptr; }
  // The file the program loads in the calls that follow (the object a request carries): sampled
  // mappings made after start-up are compared with it byte for byte (CodeSamples::match), so code
  // mapped under the object's name but not from its bytes is told apart. Empty: none.
  void expect_loaded_code(std::string bytes) { loaded_code_ = std::move(bytes); }
  // The next request with call marks samples its marked calls listed in `calls` (0-based, the order
  // of their marks) every `period_ns` of CPU time instead of SandboxLimits::sample_period_ns
  // (SandboxReply::densely_sampled_calls). The program cannot tell which calls they are: the period
  // changes while it waits for an opening mark's acknowledgement.
  void sample_densely(std::vector<int> calls, int64_t period_ns) {
    dense_calls_ = std::move(calls);
    dense_period_ns_ = period_ns;
  }

 private:
  SandboxReply fail_and_reap(SandboxStatus status, std::string message, const std::string& frame);
  bool wait_hello(std::string* error);
  void start_sampling();

  std::string program_;
  std::vector<std::string> args_;
  SandboxLimits limits_;
  pid_t pid_ = -1;
  pid_t program_pid_ = -1;  // resolved once per start by program_pid()
  int channel_ = -1;  // parent end of the socketpair
  int output_ = -1;   // read end of the child's stdout/stderr pipe
  std::string work_dir_;
  std::string output_tail_;
  int starts_ = 0;
  int calls_since_start_ = 0;
  std::unique_ptr<sandbox_detail::WorkerSampling> sampling_;  // the program's sampler and start-up mappings
  std::vector<int> dense_calls_;  // sample_densely, for the next request with call marks
  int64_t dense_period_ns_ = 0;
  std::string loaded_code_;                                    // expect_loaded_code
};

// Throws turnrl::Error when limits ask for namespaces and this machine cannot make them: names
// what failed and `config_key` (e.g. "evaluator.sandbox"), the key that opts into rlimits-only.
// Probes once per process (a sandboxed /usr/bin/true) and remembers the answer.
void require_sandbox(const SandboxLimits& limits, const std::string& config_key);

// One run of a program under the same sandbox (no channel): e.g. the compiler on candidate source.
struct CommandResult {
  SandboxStatus status = SandboxStatus::ok;  // ok: it exited (any exit code)
  int exit_code = -1;
  int signal = 0;
  std::string output;  // stdout+stderr, at most limits.output_bytes
  std::string message;
};
// Runs program with args on the files of work_dir (which must exist; it is not removed): with
// rlimits_only it runs in work_dir; with namespaces it runs in /sandbox on its tmpfs, the files named
// in `inputs` are copied there from work_dir first and those named in `outputs` (regular files of
// at most limits.file_bytes) back to work_dir after it exited, so that nothing it does on its own
// file system outlives it.
CommandResult run_sandboxed(const std::string& program, const std::vector<std::string>& args,
                            const SandboxLimits& limits, const std::string& work_dir,
                            const std::vector<std::string>& inputs = {}, const std::vector<std::string>& outputs = {});
// A fresh private directory (mode 0700) under $TMPDIR or /tmp named <prefix>-<pid>-XXXXXX, and its
// recursive removal.
std::string make_private_dir(const std::string& prefix);
void remove_private_dir(const std::string& dir);
// Removes the turnrl-* private directories under $TMPDIR or /tmp whose creating process is gone
// (left by SIGKILLed runs); returns how many were removed.
int remove_stale_private_dirs();
// The directory that sandboxed programs see as their working directory (namespaces): compiler
// messages name files under it.
inline constexpr const char* kSandboxWorkDir = "/sandbox";

// Finds a helper program (e.g. "turnrl_cpu_worker") among turnrl's helpers (core/install_paths.h:
// $TURNRL_WORKER_DIR, the running program's folder, <program>/../libexec/turnrl, ...). Throws
// turnrl::Error naming the folders tried if absent.
std::string find_helper_program(const std::string& name);

// The child side: what a worker program's main() uses.
namespace sandbox_child {
// Installs the crash reporter (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL on an alternate stack):
// it tells the parent whether the address-space limit was the cause, then dies of the signal.
void install_crash_reporter();
// Sends the hello frame; call once after start-up work.
void say_hello();
// Blocks for the next request; false when the parent closed the channel.
bool read_request(std::string& request);
void write_reply(const std::string& reply);
// Locks the worker down (process_lockdown.h: writes confined to its directory, code and vDSO
// sealed, library GOT slots guarded), then installs the candidate seccomp profile (no processes,
// threads, programs, sockets or signals to others; syscall_filter.h) when the parent started this
// worker with namespaces (not in rlimits_only). Call after start-up work, before any candidate code
// is loaded. Exits the worker if it
// fails. gpu_driver: the refusals only, threads and every other call allowed (the CUDA worker: the GPU
// driver and CUPTI run threads of their own, and their calls after set-up are not yet listed).
void confine_candidate(bool gpu_driver = false);
// Re-arms RLIMIT_CPU so that this call may use the configured per-call CPU seconds.
void arm_cpu_limit();
// Loads a shared object from its bytes (a candidate's object, which arrives in the request: workers
// never see the parent's cache): written into this worker's own private directory (its working
// directory, the sandbox's tmpfs), dlopen'ed (RTLD_NOW | RTLD_LOCAL) and unlinked at once (the
// mapping stays). Each load gets a new name: dlopen of a name it has open would hand back the old
// object. Null with `why` set when it cannot be written or loaded.
void* load_shared_object(const std::string& bytes, std::string& why);
// Marks an edge of a measured call: the parent reads this process's CPU clock from outside while
// it waits here for the acknowledgement (SandboxReply::call_marks), so that what the edges enclose is
// known without trusting any clock or number in this process. False when the channel failed.
bool mark_call();
// Mark the edges of a call of library routine `routine` (0-255) this worker serves its candidate
// (SandboxReply::library_uses), without waiting for the parent; each carries the thread's CPU clock
// as read when it is sent, and the parent takes the difference. How often and how long each routine
// ran is then known without trusting counters or saved times in this process, which a candidate can
// rewrite: the caller blocks every signal between the edges (cpu_worker.cpp), so no candidate
// handler runs there, and the worker's code, GOT, vDSO and channel are sealed (process_lockdown.h).
bool mark_library_entry(int routine);
bool mark_library_exit(int routine);
// After a candidate's call: whether a guarded GOT slot of a loaded library changed (every slot is
// put back). No allocation, no call through a writable GOT (process_lockdown.h).
bool library_gots_rewritten();
// Tells the parent the limit was hit (std::bad_alloc in the candidate), then exits.
[[noreturn]] void report_out_of_memory();
}  // namespace sandbox_child

}  // namespace turnrl
