#include "syscall_filter.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "process_lockdown.h"
#include "turnrl/core/error.h"

namespace turnrl::sandbox_detail {
namespace {

constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
                                        CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP};

// Calls no sandboxed program needs, refused in both profiles.
constexpr int kToolDenied[] = {
    SCMP_SYS(ptrace),          SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev), SCMP_SYS(mount),
    SCMP_SYS(umount2),         SCMP_SYS(pivot_root),       SCMP_SYS(chroot),            SCMP_SYS(unshare),
    SCMP_SYS(setns),           SCMP_SYS(bpf),              SCMP_SYS(perf_event_open),   SCMP_SYS(keyctl),
    SCMP_SYS(add_key),         SCMP_SYS(request_key),      SCMP_SYS(userfaultfd),       SCMP_SYS(init_module),
    SCMP_SYS(finit_module),    SCMP_SYS(delete_module),    SCMP_SYS(kexec_load),        SCMP_SYS(kexec_file_load),
    SCMP_SYS(reboot),          SCMP_SYS(swapon),           SCMP_SYS(swapoff),           SCMP_SYS(acct),
    SCMP_SYS(settimeofday),    SCMP_SYS(clock_settime),    SCMP_SYS(clock_adjtime),     SCMP_SYS(adjtimex),
    SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at), SCMP_SYS(fsopen),         SCMP_SYS(fsmount),
    SCMP_SYS(fsconfig),        SCMP_SYS(move_mount),       SCMP_SYS(open_tree),         SCMP_SYS(mount_setattr),
    SCMP_SYS(syslog),          SCMP_SYS(quotactl),         SCMP_SYS(io_uring_setup),    SCMP_SYS(kcmp),
};
// Refused to candidate code with EPERM: no new processes, no programs, no sockets.
constexpr int kCandidateDenied[] = {SCMP_SYS(fork),   SCMP_SYS(vfork),      SCMP_SYS(execve),
                                    SCMP_SYS(execveat), SCMP_SYS(socket),   SCMP_SYS(socketpair)};

// The candidate profile's allow-list: what a worker running LibTorch (or CPython and torch) and a
// candidate's own code needs once it is started. Anything else answers ENOSYS, so that libc falls
// back to an older call where it has one, and calls a kernel adds later are refused until listed.
// By name, so that a libseccomp that does not know one (an older release) skips it.
constexpr const char* kCandidateAllowed[] = {
    // memory
    // (not memfd_create: its memory counts against neither the address-space limit nor the scratch
    // tmpfs, 3.2 GiB held by one probe)
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock", "munlock", "membarrier",
    // files: the sandbox's own tmpfs and read-only binds are all it can reach
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2", "lseek",
    "open", "openat", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "flock", "fsync", "fdatasync",
    "ftruncate", "truncate", "fallocate", "sendfile", "copy_file_range", "stat", "fstat", "lstat", "newfstatat",
    "statx", "statfs", "fstatfs", "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents",
    "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename",
    "renameat", "renameat2", "chmod", "fchmod", "fchmodat", "umask", "utimensat", "pipe", "pipe2", "eventfd",
    "eventfd2", "ioctl", "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2",
    // the result channel (already open)
    "sendto", "recvfrom", "sendmsg", "recvmsg",
    // time
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time", "times", "getitimer",
    "setitimer", "alarm",
    // this process
    "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getgroups", "getresuid", "getresgid",
    "getpgrp", "getpgid", "getsid", "getrlimit", "setrlimit", "prlimit64", "getrusage", "sysinfo", "uname",
    "getpriority", "getcpu", "sched_getaffinity", "sched_setaffinity", "sched_yield", "sched_getparam",
    "sched_getscheduler", "sched_getattr", "sched_get_priority_max", "sched_get_priority_min", "getrandom", "prctl",
    "seccomp", "capget",
    // threads and their synchronisation (whether a thread may start is the clone rule below)
    "futex", "futex_waitv", "set_robust_list", "get_robust_list", "set_tid_address", "rseq", "arch_prctl", "exit",
    "exit_group", "restart_syscall",
    // signals (to others: the rules below)
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
    "sigaltstack", "pause",
};

struct ContextDeleter {
  void operator()(scmp_filter_ctx c) const { seccomp_release(c); }
};

void check(int rc, const char* what) {
  if (rc < 0) fail("sandbox: seccomp rule for {} could not be added ({})", what, std::strerror(-rc));
}

// Whether a profile is an allow-list (default ENOSYS) rather than a deny-list (default allow).
bool allow_listed(FilterProfile profile) {
  return profile == FilterProfile::candidate || profile == FilterProfile::native_candidate;
}

// The candidate profiles' rules, stacked on the tool profile the program was started with, so a
// call must pass both.
// Calls that close or replace a descriptor, each with the argument that names the one it changes.
struct FdCall {
  const char* name;
  unsigned arg;
};
constexpr FdCall kFdChangingCalls[] = {{"close", 0}, {"dup2", 1}, {"dup3", 1}};

bool changes_fds(const char* name) {
  for (const FdCall& call : kFdChangingCalls)
    if (std::strcmp(call.name, name) == 0) return true;
  return std::strcmp(name, "close_range") == 0;
}

// The channel stays: every call that would close or replace it is refused, the rest allowed (on
// the allow-list) with the complementary condition, since libseccomp orders no unconditional rule
// against a conditional one of the same call.
void add_channel_rules(scmp_filter_ctx c, bool listed, int channel_fd) {
  const uint32_t refuse = SCMP_ACT_ERRNO(EPERM);
  const uint64_t fd = uint64_t(channel_fd);
  for (const FdCall& call : kFdChangingCalls) {
    const int nr = seccomp_syscall_resolve_name(call.name);
    if (nr == __NR_SCMP_ERROR) continue;
    check(seccomp_rule_add(c, refuse, nr, 1, scmp_arg_cmp{call.arg, SCMP_CMP_EQ, fd, 0}), call.name);
    if (listed) check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 1, scmp_arg_cmp{call.arg, SCMP_CMP_NE, fd, 0}), call.name);
  }
  const int nr = seccomp_syscall_resolve_name("close_range");
  if (nr == __NR_SCMP_ERROR) return;
  // close_range(first, last, flags) covers the channel when first <= fd <= last.
  check(seccomp_rule_add(c, refuse, nr, 2, SCMP_A0(SCMP_CMP_LE, fd), SCMP_A1(SCMP_CMP_GE, fd)), "close_range");
  if (listed) {
    check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 1, SCMP_A0(SCMP_CMP_GT, fd)), "close_range");
    check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 1, SCMP_A1(SCMP_CMP_LT, fd)), "close_range");
  }
}

void add_candidate_rules(scmp_filter_ctx c, FilterProfile profile, pid_t own_pid, int channel_fd) {
  const uint32_t refuse = SCMP_ACT_ERRNO(EPERM);
  // The GPU profile allows by default: allow rules would repeat the default, which libseccomp refuses.
  const bool listed = allow_listed(profile);
  if (listed)
    for (const char* name : kCandidateAllowed) {
      if (channel_fd >= 0 && changes_fds(name)) continue;  // add_channel_rules
      if (profile == FilterProfile::native_candidate && std::strcmp(name, "mprotect") == 0) continue;  // below
      const int nr = seccomp_syscall_resolve_name(name);
      if (nr != __NR_SCMP_ERROR) check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 0), name);
    }
  // No memory made executable once the worker runs: the loader maps a candidate's code executable
  // with mmap, never with mprotect (a -fPIC object has no text relocations), and an honest
  // candidate makes no code. A page of its own object's writable data made executable would run
  // copied library code as the candidate's (a red-team probe ran the BLAS's sgemm_ from a .data
  // page of its object, put back to zeros before the sampler compared the object's bytes).
  // Complementary conditions, as for the channel's calls. Native workers only: PyTorch's oneDNN
  // makes its JIT code executable with mprotect (a Python reference's F.linear failed with "could
  // not create a primitive").
  if (profile == FilterProfile::native_candidate) {
    const int nr = SCMP_SYS(mprotect);
    check(seccomp_rule_add(c, refuse, nr, 1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC)), "mprotect");
    check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)), "mprotect");
  }
  // mseal: the worker seals each candidate object it loads (sandbox_child::load_shared_object).
  // libseccomp 2.5 predates it: by number there (process_lockdown.h; the same on x86-64 and arm64).
  if (listed) {
    const int nr = seccomp_syscall_resolve_name("mseal");
#if defined(__x86_64__) || defined(__aarch64__)
    check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr != __NR_SCMP_ERROR ? nr : int(mseal_number()), 0), "mseal");
#else
    if (nr != __NR_SCMP_ERROR) check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 0), "mseal");
#endif
  }
  if (channel_fd >= 0) add_channel_rules(c, listed, channel_fd);
  for (int nr : kCandidateDenied) check(seccomp_rule_add(c, refuse, nr, 0), "a process call");
  // clone3 is left to the default here and refused with ENOSYS by the tool profile underneath, which
  // makes libc use clone, whose flags a filter reads.
  if (listed)
    check(seccomp_rule_add(c, refuse, SCMP_SYS(clone), 0), "clone");
  else  // gpu: threads stay allowed (the default); a clone without CLONE_THREAD is a new process
    check(seccomp_rule_add(c, refuse, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)), "clone");
  // Signals to the worker itself (raise, abort, pthread_kill) only.
  for (int nr : {SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo)}) {
    if (listed)
      check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 1, SCMP_A0(SCMP_CMP_EQ, uint64_t(own_pid))), "a signal call");
    check(seccomp_rule_add(c, refuse, nr, 1, SCMP_A0(SCMP_CMP_NE, uint64_t(own_pid))), "a signal call");
  }
  for (int nr : {SCMP_SYS(tkill), SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_send_signal)})
    check(seccomp_rule_add(c, refuse, nr, 0), "a signal call");
}

}  // namespace

SyscallFilter build_syscall_filter(FilterProfile profile, pid_t own_pid, int channel_fd) {
  std::unique_ptr<void, ContextDeleter> ctx(seccomp_init(allow_listed(profile) ? SCMP_ACT_ERRNO(ENOSYS) : SCMP_ACT_ALLOW));
  if (!ctx) fail("sandbox: seccomp_init failed");
  scmp_filter_ctx c = ctx.get();
  if (profile != FilterProfile::tool) {
    add_candidate_rules(c, profile, own_pid, channel_fd);
  } else {
    const uint32_t refuse = SCMP_ACT_ERRNO(EPERM);
    for (int nr : kToolDenied) check(seccomp_rule_add(c, refuse, nr, 0), "a refused call");
    // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc use clone.
    check(seccomp_rule_add(c, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3");
    for (uint64_t flag : kNamespaceFlags)
      check(seccomp_rule_add(c, refuse, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)), "clone");
    check(seccomp_rule_add(c, refuse, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX)), "socket");
  }
  // Export the BPF program through a memory file: it is installed later, after fork, with prctl.
  const int fd = memfd_create("turnrl-seccomp", MFD_CLOEXEC);
  if (fd < 0) fail("sandbox: memfd_create for the seccomp program failed: {}", std::strerror(errno));
  const int rc = seccomp_export_bpf(c, fd);
  SyscallFilter filter;
  const off_t bytes = lseek(fd, 0, SEEK_END);
  if (rc == 0 && bytes > 0) {
    filter.program.resize(size_t(bytes) / sizeof(sock_filter));
    const ssize_t got = pread(fd, filter.program.data(), size_t(bytes), 0);
    if (got != bytes) filter.program.clear();
  }
  ::close(fd);
  if (filter.program.empty()) fail("sandbox: the seccomp program could not be exported ({})", std::strerror(-rc));
  return filter;
}

int install_syscall_filter(SyscallFilter& filter) {
  sock_fprog prog = filter.fprog();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) return errno;
  return 0;
}

}  // namespace turnrl::sandbox_detail
