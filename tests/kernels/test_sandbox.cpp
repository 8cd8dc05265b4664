#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "candidates.h"
#include "kernels/code_sampler.h"
#include "kernels/process_lockdown.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/kernels/sandbox.h"

using namespace turnrl;
using turnrl::test::request;

namespace {
struct Dir {
  std::string path = make_private_dir("turnrl-test");
  ~Dir() { remove_private_dir(path); }
};
CommandResult sh(const std::string& script, SandboxLimits limits = SandboxLimits{}.wall(5)) {
  Dir d;
  return run_sandboxed("/bin/sh", {"-c", script}, limits, d.path);
}
}  // namespace

TEST_CASE("sandbox: a command runs in its private directory with a restricted environment") {
  Dir d;
  for (const SandboxIsolation mode : {SandboxIsolation::namespaces, SandboxIsolation::rlimits_only}) {
    CommandResult r = run_sandboxed("/bin/sh", {"-c", "pwd; env | sort"}, SandboxLimits{}.isolate(mode), d.path);
    REQUIRE(r.status == SandboxStatus::ok);
    CHECK(r.exit_code == 0);
    const std::string home = mode == SandboxIsolation::namespaces ? kSandboxWorkDir : d.path;
    CHECK_THAT(r.output, Catch::StartsWith(home + "\n"));
    CHECK_THAT(r.output, Catch::Contains("HOME=" + home));
    CHECK_THAT(r.output, !Catch::Contains("TURNRL_TEST_SECRET"));
  }
}

namespace fs = std::filesystem;

TEST_CASE("sandbox: namespaces show only /usr, the listed paths and a private tmpfs, as an unprivileged user") {
  Dir d, visible;
  fs::permissions(visible.path, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  { std::ofstream(visible.path + "/seen.txt") << "visible"; }
  { std::ofstream(d.path + "/input.txt") << "input"; }
  const std::string script =
      "id -u; cat input.txt; echo; cat " + visible.path + "/seen.txt; echo; ls /; hostname; "
      "echo x > " + visible.path + "/seen.txt || echo refused; ls /root /home /etc/hostname 2>&1 | head -3; "
      "echo made > output.txt; ps -e 2>/dev/null | wc -l; "
      "head -c 3000000 /dev/zero > big || echo full";
  SandboxLimits l = SandboxLimits{}.wall(10).scratch(2 << 20).visible(visible.path);
  CommandResult r = run_sandboxed("/bin/sh", {"-c", script}, l, d.path, {"input.txt"}, {"output.txt"});
  INFO(r.output);
  REQUIRE(r.status == SandboxStatus::ok);
  CHECK_THAT(r.output, Catch::StartsWith("1000\ninput\nvisible\n"));
  CHECK_THAT(r.output, Catch::Contains("sandbox\n"));     // its own host name
  CHECK_THAT(r.output, Catch::Contains("refused"));        // the visible path is read-only
  CHECK_THAT(r.output, Catch::Contains("No such file"));   // no /root, /home, /etc/hostname
  CHECK_THAT(r.output, Catch::Contains("full"));           // the tmpfs has its size limit
  CHECK_THAT(r.output, !Catch::Contains("home\n"));
  std::ifstream seen(visible.path + "/seen.txt");
  std::string content;
  seen >> content;
  CHECK(content == "visible");
  std::ifstream out(d.path + "/output.txt");
  std::string made;
  out >> made;
  CHECK(made == "made");  // listed outputs come back to the exchange directory
  CHECK_FALSE(fs::exists(d.path + "/big"));
}

TEST_CASE("sandbox: isolation names parse, and a bad one names the field and the choices") {
  CHECK(parse_sandbox_isolation("namespaces", "evaluator.sandbox") == SandboxIsolation::namespaces);
  CHECK(parse_sandbox_isolation("rlimits-only", "evaluator.sandbox") == SandboxIsolation::rlimits_only);
  CHECK_THROWS_WITH(parse_sandbox_isolation("chroot", "evaluator.sandbox"),
                    Catch::Contains("evaluator.sandbox") && Catch::Contains("'chroot'") &&
                        Catch::Contains("namespaces, rlimits-only"));
  CHECK_NOTHROW(require_sandbox(SandboxLimits{}, "evaluator.sandbox"));
  CHECK_NOTHROW(require_sandbox(SandboxLimits{}.isolate(SandboxIsolation::rlimits_only), "evaluator.sandbox"));
}

// Run by the next test inside a sandbox, whose seccomp filter refuses unshare: a machine without
// user namespaces, as the evaluator sees it.
TEST_CASE("sandbox: (inner) require_sandbox where namespaces are refused", "[.inner]") {
  try {
    require_sandbox(SandboxLimits{}, "evaluator.sandbox");
    std::puts("require_sandbox accepted");
  } catch (const Error& e) {
    std::puts(e.what());
  }
}

TEST_CASE("sandbox: without namespaces the evaluator refuses to start, naming the step and the opt-in key") {
  Dir d;
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  CommandResult r = run_sandboxed(self, {"sandbox: (inner) require_sandbox where namespaces are refused"},
                                  SandboxLimits{}.wall(30), d.path);
  INFO(r.output);
  REQUIRE(r.status == SandboxStatus::ok);
  CHECK_THAT(r.output, Catch::Contains("evaluator.sandbox: 'namespaces' sandbox unavailable"));
  CHECK_THAT(r.output, Catch::Contains("unshare (user, mount, pid, network, IPC, UTS namespaces) failed: EPERM"));
  CHECK_THAT(r.output, Catch::Contains("Set evaluator.sandbox: rlimits-only"));
  CHECK_THAT(r.output, !Catch::Contains("require_sandbox accepted"));
}

TEST_CASE("sandbox: directories left by dead processes are removed at start-up, live ones kept") {
  const char* tmp = std::getenv("TMPDIR");
  const fs::path root = tmp && *tmp ? tmp : "/tmp";
  // A pid that is certainly gone: a child that has exited and been reaped.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  int st = 0;
  waitpid(gone, &st, 0);
  const fs::path stale = root / fmt::format("turnrl-compile-{}-abcdef", gone);
  fs::create_directories(stale / "inner");
  Dir live;  // this process's own
  CHECK(remove_stale_private_dirs() >= 1);
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live.path));
}

TEST_CASE("sandbox: no inherited file descriptors beyond stdin/stdout/stderr") {
  const int leaked = ::dup(2);  // an fd without O_CLOEXEC in the parent
  CommandResult r = sh("ls /proc/self/fd | wc -l");
  ::close(leaked);
  REQUIRE(r.status == SandboxStatus::ok);
  // 0, 1, 2 and the fd ls itself opens for the directory.
  CHECK(std::stoi(r.output) <= 4);
}

TEST_CASE("sandbox: exit codes, wall-clock limit, output limit, signals") {
  CHECK(sh("exit 3").exit_code == 3);
  CommandResult slow = sh("sleep 30", SandboxLimits{}.wall(0.5));
  CHECK(slow.status == SandboxStatus::timeout);
  CommandResult flood = sh("yes", SandboxLimits{}.wall(5).output(1 << 16));
  CHECK(flood.status == SandboxStatus::output_limit);
  CHECK(flood.output.size() == size_t(1 << 16));
  CommandResult killed = sh("kill -SEGV $$");
  CHECK(killed.status == SandboxStatus::crashed);
  CHECK(killed.signal == SIGSEGV);
}

// A worker in Python (the frame protocol of sandbox.h: u64 length, kind byte, body): it greets, then
// answers each request after burning about 0.2 s of CPU, and when the request says "twice" it sends
// a second frame straight after the first.
constexpr const char* kFrameWorker = R"(
import os, time
def send(kind, body):
    data = kind + body
    os.write(3, len(data).to_bytes(8, "little") + data)
def read(n):
    got = b""
    while len(got) < n:
        chunk = os.read(3, n - len(got))
        if not chunk:
            raise SystemExit(0)
        got += chunk
    return got
send(b"H", b"")
while True:
    body = read(int.from_bytes(read(8), "little"))[1:]
    t = time.process_time()
    while time.process_time() - t < 0.2:
        pass
    if body == b"marks":  # two call marks around 0.2 s of work, each acknowledged by the parent
        for _ in range(2):
            os.write(3, (1).to_bytes(8, "little") + b"T")
            if read(1) != b"T":
                raise SystemExit(4)
            t = time.process_time()
            while time.process_time() - t < 0.2:
                pass
    def mark(kind, spin, routine=0):  # a mark (a call mark waits for the parent's acknowledgement), then `spin` s of CPU
        if kind == b"T":
            os.write(3, (1).to_bytes(8, "little") + kind)
            if read(1) != kind:
                raise SystemExit(4)
        else:  # b"E" (entry) or b"X" (exit), each with the CPU clock and the monotonic clock in ns
            ns = time.thread_time_ns()
            os.write(3, (19).to_bytes(8, "little") + b"L" + kind + bytes([routine]) + ns.to_bytes(8, "little") +
                     time.monotonic_ns().to_bytes(8, "little"))
        t = time.process_time()
        while time.process_time() - t < spin:
            pass
    if body in (b"zlib", b"bz2", b"zlib in routine"):  # a marked call of 0.2 s of CPU in libz (loaded at
        import bz2, zlib                                 # start-up) or libbz2 (now); or libz inside routine 4
        data = os.urandom(1 << 16)
        work = (lambda: bz2.compress(data)) if body == b"bz2" else (lambda: zlib.crc32(data))
        mark(b"T", 0)
        if body == b"zlib in routine":
            mark(b"E", 0, 4)
        t = time.process_time()
        while time.process_time() - t < 0.2:
            work()
        if body == b"zlib in routine":
            mark(b"X", 0, 4)
        mark(b"T", 0)
    if body.startswith(b"copied "):  # a library's file copied as ./candidate-1.so, loaded, 0.2 s of its
        import ctypes, shutil          # lzma_crc64 in a marked call (liblzma: not loaded before)
        shutil.copyfile(body[7:].decode(), "candidate-1.so")
        copy = ctypes.CDLL("./candidate-1.so")
        os.remove("candidate-1.so")
        copy.lzma_crc64.restype = ctypes.c_uint64
        data = os.urandom(1 << 16)
        mark(b"T", 0)
        t = time.process_time()
        while time.process_time() - t < 0.2:
            copy.lzma_crc64(data, ctypes.c_size_t(len(data)), ctypes.c_uint64(0))
        mark(b"T", 0)
    if body == b"library":  # in a marked call: a 0.2 s call of routine 1, 0.2 s of own work; then one outside
        for kind, spin in ((b"T", 0), (b"E", 0.2), (b"X", 0.2), (b"T", 0), (b"E", 0.1), (b"X", 0)):
            mark(kind, spin, 1)
    if body == b"library only":  # routine 2 then routine 5, 0.1 s each, no call marks
        for kind, spin, routine in ((b"E", 0.1, 2), (b"X", 0, 2), (b"E", 0.1, 5), (b"X", 0, 5)):
            mark(kind, spin, routine)
    if body == b"library nested":  # an entry inside an entry: a bad frame
        mark(b"E", 0, 1)
        mark(b"E", 0, 2)
    if body == b"library wrong exit":  # routine 3 left inside a call of routine 1: a bad frame
        mark(b"E", 0, 1)
        mark(b"X", 0, 3)
    if body == b"library unclosed":  # entered, never left, then the reply: a bad frame
        mark(b"E", 0, 1)
    if body == b"library clock back":  # an exit whose clock reads before its entry: a bad frame
        os.write(3, (19).to_bytes(8, "little") + b"LE" + bytes([1]) + (10**12).to_bytes(8, "little") + bytes(8))
        os.write(3, (19).to_bytes(8, "little") + b"LX" + bytes([1]) + (5).to_bytes(8, "little") + bytes(8))
    if body == b"spawn":  # a child left running
        import subprocess, sys
        subprocess.Popen([sys.executable, '-I', '-c', 'import time; time.sleep(60)'])
    if body == b"daemon":  # a grandchild whose parent has exited (a double fork)
        first = os.fork()
        if first == 0:
            if os.fork() == 0:
                time.sleep(60)
            os._exit(0)
        os.waitpid(first, 0)
    if body == b"huge":  # declares a terabyte, then streams what it can
        os.write(3, (1 << 40).to_bytes(8, "little") + b"R")
        while True:
            os.write(3, b"x" * (1 << 20))
    send(b"R", body)
    if body == b"twice":
        send(b"R", b"stray")
)";

TEST_CASE("sandbox: the worker's CPU time and threads are read from outside, and a second frame is reported") {
  for (SandboxIsolation isolation : {SandboxIsolation::namespaces, SandboxIsolation::rlimits_only}) {
    INFO(to_string(isolation));
    SandboxWorker worker("/usr/bin/python3", {"-I", "-c", kFrameWorker}, SandboxLimits{}.wall(10).isolate(isolation));
    REQUIRE(worker.start());
    // With namespaces pid() waits outside the pid namespace; the program is its init's child.
    CHECK((worker.program_pid() == worker.pid()) == (isolation == SandboxIsolation::rlimits_only));
    CHECK(worker.thread_count() == 1);
    const double before = worker.billed_cpu_seconds();
    REQUIRE(std::isfinite(before));
    SandboxReply once = worker.call("once");
    REQUIRE(once.status == SandboxStatus::ok);
    CHECK(once.payload == "once");
    CHECK(once.trailing_bytes == 0);
    CHECK(worker.billed_cpu_seconds() - before >= 0.15);  // the busy loop, whatever the worker says
    SandboxReply twice = worker.call("twice");
    REQUIRE(twice.status == SandboxStatus::ok);
    CHECK(twice.payload == "twice");
    // The stray frame arrives with the reply or just after it; either way the next read sees it.
    if (twice.trailing_bytes == 0) CHECK(worker.call("next").payload == "stray");
    else CHECK(twice.trailing_bytes == 8 + 6);
    worker.stop();
    CHECK(std::isnan(worker.billed_cpu_seconds()));
  }
}

TEST_CASE("sandbox: processes the program leaves running are counted from outside, double forks too with namespaces") {
  for (SandboxIsolation isolation : {SandboxIsolation::namespaces, SandboxIsolation::rlimits_only}) {
    INFO(to_string(isolation));
    SandboxWorker worker("/usr/bin/python3", {"-I", "-c", kFrameWorker}, SandboxLimits{}.wall(10).isolate(isolation));
    CHECK(worker.stray_processes() == 0);  // not started
    REQUIRE(worker.start());
    REQUIRE(worker.call("once").status == SandboxStatus::ok);
    CHECK(worker.stray_processes() == 0);
    REQUIRE(worker.call("spawn").status == SandboxStatus::ok);
    CHECK(worker.stray_processes() == 1);
    REQUIRE(worker.call("daemon").status == SandboxStatus::ok);
    // The grandchild is adopted by the sandbox's init with namespaces, by a process outside without.
    CHECK(worker.stray_processes() == (isolation == SandboxIsolation::namespaces ? 2 : 1));
    worker.stop();
    CHECK(worker.stray_processes() == 0);
  }
}

TEST_CASE("sandbox: a reply longer than reply_bytes is a bad frame, read no further than its header") {
  SandboxLimits limits = SandboxLimits{}.wall(10);
  limits.reply_bytes = int64_t(1) << 20;
  SandboxWorker worker("/usr/bin/python3", {"-I", "-c", kFrameWorker}, limits);
  REQUIRE(worker.start());
  const auto t0 = std::chrono::steady_clock::now();
  SandboxReply huge = worker.call("huge");
  CHECK(huge.status == SandboxStatus::bad_frame);
  CHECK_THAT(huge.message, Catch::Contains("1099511627776 bytes") && Catch::Contains("reply_bytes"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));  // not the wall limit
  SandboxReply next = worker.call("after");  // a fresh worker
  CHECK(next.status == SandboxStatus::ok);
  CHECK(next.payload == "after");
}

TEST_CASE("sandbox: call marks are acknowledged and timed with the worker's CPU clock, or refused unasked") {
  for (SandboxIsolation isolation : {SandboxIsolation::namespaces, SandboxIsolation::rlimits_only}) {
    INFO(to_string(isolation));
    SandboxWorker worker("/usr/bin/python3", {"-I", "-c", kFrameWorker}, SandboxLimits{}.wall(10).isolate(isolation));
    SandboxReply marked = worker.call("marks", /*call_marks=*/true);
    REQUIRE(marked.status == SandboxStatus::ok);
    CHECK(marked.payload == "marks");
    REQUIRE(marked.call_marks.size() == 2);
    // Between the two marks the worker spun 0.2 s of CPU; its clock was read while it waited.
    CHECK(marked.call_marks[1] - marked.call_marks[0] >= 0.19);
    CHECK(marked.call_marks[1] - marked.call_marks[0] < 0.6);
    SandboxReply unasked = worker.call("marks");  // a mark nobody asked for is not a reply
    CHECK(unasked.status == SandboxStatus::bad_frame);
    CHECK(worker.call("after").payload == "after");  // a fresh worker
  }
}

TEST_CASE("sandbox: library marks are always taken, and their calls and CPU time counted inside marked calls") {
  for (SandboxIsolation isolation : {SandboxIsolation::namespaces, SandboxIsolation::rlimits_only}) {
    INFO(to_string(isolation));
    SandboxWorker worker("/usr/bin/python3", {"-I", "-c", kFrameWorker}, SandboxLimits{}.wall(10).isolate(isolation));
    SandboxReply marked = worker.call("library", /*call_marks=*/true);
    REQUIRE(marked.status == SandboxStatus::ok);
    CHECK(marked.call_marks.size() == 2);
    // The routine call after the call's end is not the call's.
    REQUIRE(marked.library_uses.size() == 1);
    CHECK(marked.library_uses[0].call == 0);
    CHECK(marked.library_uses[0].routine == 1);
    CHECK(marked.library_uses[0].calls == 1);
    CHECK(marked.library_uses[0].cpu_seconds >= 0.19);
    CHECK(marked.library_uses[0].cpu_seconds < 0.35);
    SandboxReply plain = worker.call("library only");  // no call marks: every routine call counts
    REQUIRE(plain.status == SandboxStatus::ok);
    REQUIRE(plain.library_uses.size() == 2);
    for (const MarkedLibraryUse& u : plain.library_uses) {
      CHECK(u.call == -1);
      CHECK(u.calls == 1);
      CHECK(u.cpu_seconds >= 0.09);
      CHECK(u.cpu_seconds < 0.25);
    }
    CHECK(plain.library_uses[0].routine == 2);
    CHECK(plain.library_uses[1].routine == 5);
    // Edges out of order are the worker's fault: a bad frame, and the next call gets a fresh worker.
    for (const char* broken : {"library nested", "library wrong exit", "library unclosed", "library clock back"}) {
      INFO(broken);
      const SandboxReply r = worker.call(broken);
      CHECK(r.status == SandboxStatus::bad_frame);
      CHECK_THAT(r.message, Catch::Contains("library") || Catch::Contains("routine"));
      CHECK(worker.call("after").payload == "after");
    }
  }
}

TEST_CASE("sandbox: marked calls are sampled from outside, each sample in the mapping its thread ran in") {
  if (const std::string& why = sandbox_detail::code_sampling_unavailable(); !why.empty()) {
    WARN("perf_event_open is unavailable here (" + why + "): calls run unsampled (the weaker mode); skipped");
    return;
  }
  for (SandboxIsolation isolation : {SandboxIsolation::namespaces, SandboxIsolation::rlimits_only}) {
    INFO(to_string(isolation));
    SandboxWorker worker("/usr/bin/python3", {"-I", "-c", kFrameWorker},
                         SandboxLimits{}.wall(10).isolate(isolation).sample_code(100000));
    REQUIRE(worker.start());
    REQUIRE(worker.sampling());
    // 0.2 s of CPU before the call, 0.2 s in zlib.crc32 between its marks: only the latter is sampled.
    for (const char* body : {"zlib", "bz2"}) {
      INFO(body);
      const SandboxReply r = worker.call(body, /*call_marks=*/true);
      REQUIRE(r.status == SandboxStatus::ok);
      CHECK(r.sample_period_seconds == Approx(1e-4));
      CHECK(r.samples_lost == 0);
      std::map<std::string, int64_t> by_mapping;
      int64_t total = 0, since_start = 0;
      for (const CodeSamples& s : r.code_samples) {
        CHECK(s.call == 0);
        by_mapping[s.mapping] += s.samples;
        total += s.samples;
        if (s.since_start) since_start += s.samples;
      }
      std::string seen;
      for (const auto& [m, n] : by_mapping) seen += m + ": " + std::to_string(n) + "\n";
      INFO(seen);
      CHECK(total >= 500);   // about 2000 on an idle machine (CPU time, not wall)
      CHECK(total <= 2300);  // not the 0.2 s before the call
      const std::string library = std::string(body) == "zlib" ? "libz.so" : "libbz2.so";
      int64_t in_library = 0;
      for (const CodeSamples& s : r.code_samples)
        if (s.mapping.find(library) != std::string::npos) {
          in_library += s.samples;
          // libz is the interpreter's own, loaded at start-up; libbz2 came with `import bz2`.
          CHECK(s.since_start == (library == "libbz2.so"));
        }
      CHECK(in_library >= total / 2);
      if (library == "libz.so") CHECK(since_start == 0);
    }
    // Code mapped after start-up is compared with the object the program was told it loads:
    // liblzma's file copied under the object's name holds liblzma's bytes, not another object's.
    std::string lzma;
    for (const char* p : {"/usr/lib/x86_64-linux-gnu/liblzma.so.5", "/usr/lib/aarch64-linux-gnu/liblzma.so.5",
                          "/usr/lib64/liblzma.so.5", "/lib64/liblzma.so.5"})
      if (fs::exists(p)) lzma = fs::canonical(p).string();
    if (lzma.empty()) WARN("no liblzma.so.5 here: the copied-library case is skipped");
    for (const bool told_lzma : {true, false}) {
      if (lzma.empty()) break;
      INFO("expected object: " << (told_lzma ? "liblzma's bytes" : "other bytes"));
      worker.expect_loaded_code(told_lzma ? read_file(lzma) : std::string(4096, 'x'));
      worker.stop();  // a fresh program each time: a library loaded once stays loaded
      const SandboxReply r = worker.call("copied " + lzma, /*call_marks=*/true);
      REQUIRE(r.status == SandboxStatus::ok);
      int64_t in_copy = 0, total = 0;
      std::string seen;
      for (const CodeSamples& s : r.code_samples) seen += s.mapping + ": " + std::to_string(s.samples) + "\n";
      INFO(seen);
      for (const CodeSamples& s : r.code_samples) {
        total += s.samples;
        if (s.mapping.find("candidate-1.so") == std::string::npos) continue;
        in_copy += s.samples;
        CHECK(s.since_start);
        CHECK(s.match == (told_lzma ? CodeMatch::loaded_object : CodeMatch::other));
      }
      CHECK(in_copy >= total / 2);
    }
    worker.expect_loaded_code("");
    // Inside a marked routine call every sample is the routine's, whatever code it landed in.
    const SandboxReply routine = worker.call("zlib in routine", /*call_marks=*/true);
    REQUIRE(routine.status == SandboxStatus::ok);
    int64_t inside = 0, outside = 0;
    for (const CodeSamples& s : routine.code_samples) (s.mapping == kInsideServedRoutine ? inside : outside) += s.samples;
    INFO(inside << " inside, " << outside << " outside");
    CHECK(inside >= 500);
    CHECK(outside <= inside / 20);  // only the interpreter's own code around the two library marks
    // Unmarked calls are not sampled.
    const SandboxReply plain = worker.call("once");
    CHECK(plain.code_samples.empty());
    CHECK(plain.sample_period_seconds == 0);
  }
}

TEST_CASE("sandbox: CPU-time limit") {
  SandboxLimits l;
  l.wall(20).cpu(0);  // RLIMIT_CPU of 1 s
  l.startup_seconds = 0;
  CommandResult r = sh("while :; do :; done", l);
  CHECK(r.status == SandboxStatus::timeout);
}

TEST_CASE("sandbox: helper program lookup names the places it tried") {
  CHECK_THAT(find_helper_program("turnrl_cpu_worker"), Catch::EndsWith("/turnrl_cpu_worker"));
  CHECK_THROWS_WITH(find_helper_program("turnrl_no_such_helper"), Catch::Contains("TURNRL_WORKER_DIR"));
}

TEST_CASE("sandbox: broken candidates cost one result each, with the right error, and the pool keeps working") {
  CpuEvalOptions o = test::test_options();
  o.limits.wall(3).cpu(2);
  o.limits.address_space(int64_t(3) << 30);
  CpuEvaluator e(o);
  std::vector<EvalRequest> reqs = {
      request("relu_bias", "segfault", "broken"),      request("relu_bias", "honest"),
      request("relu_bias", "hang", "broken"),          request("relu_bias", "unbounded_alloc", "broken"),
      request("relu_bias", "print_100mb", "broken"),   request("relu_bias", "no_compile", "broken"),
      request("relu_bias", "runtime_error", "broken"), request("relu_bias", "honest"),
  };
  const auto res = e.evaluate(reqs);
  auto info = [&](size_t i) { return to_string(res[i].error) + std::string(": ") + res[i].message; };
  INFO(info(0));
  CHECK(res[0].error == EvalError::crash);
  CHECK_THAT(res[0].message, Catch::Contains("signal 11"));
  INFO(info(1));
  CHECK(res[1].correct);
  INFO(info(2));
  CHECK(res[2].error == EvalError::timeout);
  CHECK_THAT(res[2].message, Catch::Contains("limit"));
  INFO(info(3));
  CHECK(res[3].error == EvalError::memory);
  INFO(info(4));
  CHECK(res[4].error == EvalError::output_limit);
  INFO(info(5));
  CHECK(res[5].error == EvalError::compile);
  CHECK_THAT(res[5].message, Catch::Contains("error"));
  CHECK(res[5].stage == EvalStage::extracted);
  INFO(info(6));
  CHECK(res[6].error == EvalError::runtime);
  CHECK_THAT(res[6].message, Catch::Contains("returned 7"));
  INFO(info(7));
  CHECK(res[7].correct);
  CHECK(e.worker_starts() >= 4 + 1);  // each crash, hang, memory and output failure replaced a worker
}

// ---- hostile candidates ----------------------------------------------------------------------
// Every route by which issue 21's probes reached outside the sandbox, as a candidate of
// tests/data/cpu_tasks/hostile that attempts it and then fails. Contained means: the evaluation
// returns one error result, this process lives, the files of a run next to it (checkpoint,
// metrics, config), the compile cache and the worker executable are unchanged, no marker appears
// in $HOME or the system's temporary folders, no process of the candidate survives, no file of the
// host reaches the feedback, and an honest candidate still evaluates correct afterwards.
// TURNRL_PROBE_SANDBOX=rlimits-only runs the same probes against the weaker mode (to measure it:
// docs/evaluator.md; most then fail, and the parent-killing ones end the test process).
namespace {

const std::string kSecret = "TURNRL_PROBE_SECRET_7f3a";
const std::vector<std::string> kMarkers = {"/tmp/turnrl_probe_marker_tmp", "/var/tmp/turnrl_probe_marker_vartmp"};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

// A run directory, a compile cache and a copy of the worker program under one private directory.
struct Outside {
  Dir dir;
  std::string run = dir.path + "/run", cache = dir.path + "/cache", bin = dir.path + "/bin";
  std::string worker = bin + "/turnrl_cpu_worker";
  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";

  Outside() {
    fs::create_directories(run + "/checkpoint");
    fs::create_directories(bin);
    { std::ofstream(run + "/checkpoint/policy.pt") << "weights " << kSecret; }
    { std::ofstream(run + "/metrics.jsonl") << "{\"step\": 1, \"reward\": 0.5}\n"; }
    { std::ofstream(run + "/config.yaml") << "secret: " << kSecret << "\n"; }
    { std::ofstream(run + "/victim.txt") << "intact"; }
    fs::copy_file(find_helper_program("turnrl_cpu_worker"), worker);
    ::setenv("TURNRL_WORKER_DIR", bin.c_str(), 1);
  }
  ~Outside() { ::unsetenv("TURNRL_WORKER_DIR"); }

  std::string fill(std::string source) const {
    source = replace_all(source, "@OUT@", dir.path);
    source = replace_all(source, "@CACHE@", cache);
    source = replace_all(source, "@WORKER@", worker);
    return replace_all(source, "@HOME@", home);
  }
  // Every file under the directory: content and permission bits.
  std::map<std::string, std::string> snapshot() const {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir.path))
      if (e.is_regular_file())
        files[e.path().string()] = fmt::format("{:o}:", int(fs::status(e.path()).permissions())) + slurp(e.path());
    return files;
  }
};

// Processes running the worker copy two seconds after the evaluator stopped (a sandbox's
// processes die with its init, a moment after the init), i.e. survivors; killed once counted.
int kill_processes_of(const std::string& program) {
  auto running = [&] {
    std::vector<pid_t> pids;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string pid = e.path().filename().string();
      std::error_code ec;
      if (pid.find_first_not_of("0123456789") == std::string::npos &&
          fs::read_symlink(e.path() / "exe", ec).string() == program)
        pids.push_back(pid_t(std::stoi(pid)));
    }
    return pids;
  };
  std::vector<pid_t> left = running();
  for (int tries = 0; tries < 20 && !left.empty(); ++tries) {
    ::usleep(100000);
    left = running();
  }
  for (pid_t p : left) kill(p, SIGKILL);
  return int(left.size());
}

SandboxIsolation probe_isolation() {
  const char* mode = std::getenv("TURNRL_PROBE_SANDBOX");
  return parse_sandbox_isolation(mode ? mode : "namespaces", "TURNRL_PROBE_SANDBOX");
}

// mode: the sandbox to probe, else TURNRL_PROBE_SANDBOX's (namespaces by default).
void require_contained(const std::string& route, std::optional<SandboxIsolation> mode = std::nullopt) {
  Outside outside;
  CpuEvalOptions o = test::test_options();
  o.workers = 1;
  o.cache_dir = outside.cache;
  o.limits.wall(10).cpu(10).isolate(mode ? *mode : probe_isolation());
  EvalRequest honest = request("relu_bias", "honest");
  EvalRequest hostile = honest;
  hostile.candidate = outside.fill(test::candidate_source("hostile", route));
  std::map<std::string, std::string> before;
  EvalResult result;
  {
    CpuEvaluator e(o);
    REQUIRE(e.evaluate({honest})[0].correct);
    before = outside.snapshot();
    result = e.evaluate({hostile})[0];
    const EvalResult again = e.evaluate({honest})[0];
    INFO("honest after the hostile one: " << to_string(again.error) << ": " << again.message);
    CHECK(again.correct);
    CHECK(e.objects_replaced() == 0);
  }
  INFO(route << ": " << to_string(result.error) << ": " << result.message);
  CHECK_FALSE(result.correct);
  CHECK(result.error != EvalError::none);
  CHECK_THAT(result.message, !Catch::Contains(kSecret));
  const std::string hostname = slurp("/etc/hostname");
  if (!hostname.empty()) CHECK_THAT(result.message, !Catch::Contains(hostname));
  CHECK_THAT(result.message, !Catch::Contains("root:x:0:0"));
  CHECK_THAT(result.message, !Catch::Contains(program_invocation_short_name));  // the trainer's command line
  CHECK(kill_processes_of(outside.worker) == 0);
  const auto after = outside.snapshot();
  for (const auto& [path, content] : before) {
    INFO(path);
    CHECK(after.count(path) == 1);
    if (after.count(path)) CHECK(after.at(path) == content);
  }
  for (const auto& [path, content] : after) {
    INFO("new file " << path);
    CHECK((before.count(path) == 1 || path.rfind(outside.cache + "/", 0) == 0));
  }
  std::vector<std::string> markers = kMarkers;
  markers.push_back(outside.home + "/turnrl_probe_marker_home");
  for (int k = 0; k < 30; ++k) markers.push_back(fmt::format("/tmp/turnrl_probe_blob_{}", k));
  for (const auto& m : markers) {
    INFO("marker " << m);
    CHECK_FALSE(fs::exists(m));
    fs::remove(m);
  }
}
}  // namespace

TEST_CASE("sandbox probe: sigqueue(SIGKILL) to the parent") { require_contained("sigqueue_parent"); }
TEST_CASE("sandbox probe: killpg of the parent's process group") { require_contained("killpg_parent"); }
TEST_CASE("sandbox probe: _Fork + setsid survivor") { require_contained("fork_setsid"); }
TEST_CASE("sandbox probe: bounded fork bomb") { require_contained("fork_bomb"); }
TEST_CASE("sandbox probe: C++ streams overwrite the compile cache") { require_contained("overwrite_cache"); }
TEST_CASE("sandbox probe: opendir + remove empty the compile cache") { require_contained("remove_cache"); }
TEST_CASE("sandbox probe: the worker executable replaced") { require_contained("replace_worker"); }
TEST_CASE("sandbox probe: a checkpoint truncated") { require_contained("truncate_checkpoint"); }
TEST_CASE("sandbox probe: chmod and remove of run files") { require_contained("chmod_and_remove"); }
TEST_CASE("sandbox probe: a forged metrics.jsonl line") { require_contained("forge_metrics"); }
TEST_CASE("sandbox probe: markers in HOME and the temporary folders") { require_contained("home_and_tmp_markers"); }
TEST_CASE("sandbox probe: a load-time constructor writes outside") { require_contained("constructor_marker"); }
TEST_CASE("sandbox probe: 240 MiB written in 30 files") { require_contained("write_240mib"); }
TEST_CASE("sandbox probe: include of an absolute path") { require_contained("include_absolute"); }
TEST_CASE("sandbox probe: include through a climbing relative path") { require_contained("include_relative"); }
TEST_CASE("sandbox probe: host files printed into the feedback") { require_contained("print_files"); }
TEST_CASE("sandbox probe: without namespaces the compiler reads only what the jail would show") {
  // rlimits-only: Landlock limits the compiler's reads to /usr, the libraries' and toolchain's
  // folders, the API header and its own directory (before, either #include printed a host file's
  // first line into the compile log).
  if (sandbox_detail::lockdown_support().landlock_abi < 1) {
    WARN("this kernel lacks Landlock: without namespaces the compiler reads what the trainer can; skipped");
    return;
  }
  for (const char* route : {"include_absolute", "include_relative"}) {
    INFO(route);
    require_contained(route, SandboxIsolation::rlimits_only);
  }
}
TEST_CASE("sandbox probe: calls outside the candidate allow-list answer ENOSYS") { require_contained("unlisted_syscalls"); }
TEST_CASE("sandbox probe: a thread started through __clone is refused") { require_contained("clone_thread"); }
TEST_CASE("sandbox probe: other candidates' cached objects are out of sight") { require_contained("read_cached_objects"); }
TEST_CASE("sandbox probe: the worker's code and channel cannot be patched or swapped") {
  // /proc/self/mem needs Landlock to close and mprotect needs mseal; the channel rules are seccomp's.
  const sandbox_detail::LockdownSupport support = sandbox_detail::lockdown_support();
  if (support.landlock_abi < 1 || !support.mseal) {
    WARN("this kernel lacks Landlock (ABI " << support.landlock_abi << ") or mseal (" << support.mseal
                                            << "): the worker's code can be rewritten here; skipped");
    return;
  }
  require_contained("patch_worker_code");
}

TEST_CASE("sandbox probe: a loaded candidate's code cannot change after loading") {
  // Its file held open from a load-time constructor: refused at load, on any kernel. A page of its
  // writable data made executable: refused by seccomp, on any kernel.
  require_contained("keep_own_object_open");
  require_contained("exec_own_data_page");
  if (!sandbox_detail::lockdown_support().mseal) {
    WARN("this kernel lacks mseal: a loaded candidate can make its code writable here; skipped");
    return;
  }
  require_contained("unprotect_own_code");
}

TEST_CASE("sandbox: lockdown parts are probed without changing the process") {
  const sandbox_detail::LockdownSupport support = sandbox_detail::lockdown_support();
  INFO("landlock ABI " << support.landlock_abi << ", mseal " << support.mseal);
  CHECK(support.landlock_abi >= 0);
  // The probe must not have confined this process: it can still write outside any folder.
  const std::string path = fmt::format("/tmp/turnrl_lockdown_probe_{}", getpid());
  { std::ofstream(path) << "x"; }
  CHECK(fs::exists(path));
  fs::remove(path);
}

TEST_CASE("sandbox probe: the init's command line, readable in the pid namespace, is not the trainer's") {
  require_contained("print_init_cmdline");
}
