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
//   candidate profile (installed by a worker after start-up, before any candidate code runs, on top
//                     of the tool profile), an allow-list: memory, file and time calls, this
//                     process's own state, threads and their synchronisation, signal handling
//                     (syscall_filter.cpp lists them); anything else answers ENOSYS. Refused with
//                     EPERM: new processes (fork, vfork, clone without CLONE_THREAD, execve,
//                     execveat), sockets, and signals to any process but the worker.
//   single-threaded candidate (the Python worker on CPU): the candidate profile with no new threads
//                     either (every clone is refused): the profiler that accounts a candidate's
//                     operators sees only the calling thread, so work on a thread would escape it.
//   gpu candidate     (the CUDA worker): the candidate profile's refusals, everything else allowed:
//                     which calls the GPU driver and CUPTI make after set-up is not yet listed.
// Refused calls return an error (EPERM, ENOSYS), so a candidate sees a failed call, never a crash.
#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace turnrl::sandbox_detail {

enum class FilterProfile { tool, candidate, single_threaded_candidate, gpu_candidate };

// A compiled BPF program, built before fork (libseccomp allocates) and installed after it with
// prctl alone (async-signal-safe). own_pid matters for the candidate profile only.
struct SyscallFilter {
  std::vector<sock_filter> program;
  sock_fprog fprog() { return sock_fprog{static_cast<unsigned short>(program.size()), program.data()}; }
};
SyscallFilter build_syscall_filter(FilterProfile profile, pid_t own_pid = 0);

// Installs the filter on the calling process (all threads) after setting no-new-privs. Returns 0
// or the errno of the failing call; async-signal-safe (used between fork and exec).
int install_syscall_filter(SyscallFilter& filter);

}  // namespace turnrl::sandbox_detail
