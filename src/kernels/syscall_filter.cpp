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
// Added for candidate code: no new processes, no programs, no sockets.
constexpr int kCandidateDenied[] = {SCMP_SYS(fork),   SCMP_SYS(vfork),      SCMP_SYS(execve),
                                    SCMP_SYS(execveat), SCMP_SYS(socket),   SCMP_SYS(socketpair)};

struct ContextDeleter {
  void operator()(scmp_filter_ctx c) const { seccomp_release(c); }
};

void check(int rc, const char* what) {
  if (rc < 0) fail("sandbox: seccomp rule for {} could not be added ({})", what, std::strerror(-rc));
}

}  // namespace

SyscallFilter build_syscall_filter(FilterProfile profile, pid_t own_pid) {
  std::unique_ptr<void, ContextDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) fail("sandbox: seccomp_init failed");
  scmp_filter_ctx c = ctx.get();
  const uint32_t refuse = SCMP_ACT_ERRNO(EPERM);
  for (int nr : kToolDenied) check(seccomp_rule_add(c, refuse, nr, 0), "a refused call");
  // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc use clone.
  check(seccomp_rule_add(c, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3");
  for (uint64_t flag : kNamespaceFlags)
    check(seccomp_rule_add(c, refuse, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)), "clone");
  if (profile == FilterProfile::tool) {
    check(seccomp_rule_add(c, refuse, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX)), "socket");
  } else {
    for (int nr : kCandidateDenied) check(seccomp_rule_add(c, refuse, nr, 0), "a process call");
    if (profile == FilterProfile::single_threaded_candidate)
      check(seccomp_rule_add(c, refuse, SCMP_SYS(clone), 0), "clone");
    else  // threads only: a clone without CLONE_THREAD is a new process
      check(seccomp_rule_add(c, refuse, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)), "clone");
    // Signals to the worker itself (raise, abort, pthread_kill) only.
    for (int nr : {SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo)})
      check(seccomp_rule_add(c, refuse, nr, 1, SCMP_A0(SCMP_CMP_NE, uint64_t(own_pid))), "a signal call");
    check(seccomp_rule_add(c, refuse, SCMP_SYS(tkill), 0), "tkill");
    check(seccomp_rule_add(c, refuse, SCMP_SYS(pidfd_open), 0), "pidfd_open");
    check(seccomp_rule_add(c, refuse, SCMP_SYS(pidfd_send_signal), 0), "pidfd_send_signal");
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
