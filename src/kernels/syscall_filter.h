#pragma once
// Seccomp filters of the sandbox (internal to src/kernels). The namespaces decide what a sandboxed
// process can see; the filters take away the calls that would let it leave them or reach the
// kernel's less-used attack surface.
//   tool profile      (before exec, every sandboxed program: compilers, Python, workers), a
//                     deny-list: no ptrace / process_vm_*, no mount, pivot_root, chroot, unshare,
//                     setns, no clone with namespace flags (clone3 answers ENOSYS so libc falls back
//                     to clone, whose flags a filter can read), no bpf, perf_event_open, keyctl,
//                     userfaultfd, kernel modules, kexec, reboot, swap, clock setting, sockets other
//                     than AF_UNIX.
//   candidate profile (the CPU workers, C++ and Python; installed after start-up, before any
//                     candidate code runs, on top of the tool profile), an allow-list: memory, file
//                     and time calls, this process's own state, thread synchronisation, signal
//                     handling (syscall_filter.cpp lists them); anything else answers ENOSYS. Refused
//                     with EPERM: new processes and threads (fork, vfork, every clone: a CPU candidate
//                     is timed against a single-threaded reference, and the profiler that accounts a
//                     Python candidate's operators sees only the calling thread), execve, execveat,
//                     sockets, and signals to any process but the worker.
//   gpu candidate     (the CUDA worker): the candidate profile's refusals but threads (the driver
//                     and CUPTI run their own), everything else allowed: which calls the GPU driver
//                     and CUPTI make after set-up is not yet listed.
// Refused calls return an error (EPERM, ENOSYS), so a candidate sees a failed call, never a crash.
#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace turnrl::sandbox_detail {

// candidate: the allow-list below (CPU workers running LibTorch or CPython and torch);
// native_candidate: the same, and no memory made executable with mprotect (the C++ CPU worker,
// whose served routines JIT nothing); gpu_candidate: the candidate refusals over allow-by-default.
enum class FilterProfile { tool, candidate, native_candidate, gpu_candidate };

// A compiled BPF program, built before fork (libseccomp allocates) and installed after it with
// prctl alone (async-signal-safe). own_pid matters for the candidate profile only.
struct SyscallFilter {
  std::vector<sock_filter> program;
  sock_fprog fprog() { return sock_fprog{static_cast<unsigned short>(program.size()), program.data()}; }
};
// channel_fd (candidate profiles; -1: none): the worker's result channel, which candidate code must
// not close or replace (close, close_range over it, dup2/dup3 onto it answer EPERM): marks of
// library calls and the reply travel on it, and a channel swapped for a pipe of the candidate's own
// during its calls would swallow the marks.
SyscallFilter build_syscall_filter(FilterProfile profile, pid_t own_pid = 0, int channel_fd = -1);

// Installs the filter on the calling process (all threads) after setting no-new-privs. Returns 0
// or the errno of the failing call; async-signal-safe (used between fork and exec).
int install_syscall_filter(SyscallFilter& filter);

}  // namespace turnrl::sandbox_detail
