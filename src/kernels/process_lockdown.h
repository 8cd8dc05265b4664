#pragma once
// What a sandboxed worker takes away from itself, once started and before any candidate code runs,
// beyond the seccomp profiles (syscall_filter.h), against a candidate that shares its process
// (internal to src/kernels). Both matter because the worker's own code -- the marks of library
// calls, the clock reads, the reply -- runs in the same address space as the candidate's:
//  - Landlock (Linux >= 5.13): files may be written, created, truncated, removed or renamed only
//    beneath the given folders (the worker's private directory), and /dev/null written. This also
//    closes /proc/self/mem for writing, through which a process can patch its own read-only code
//    without changing any mapping's protection.
//  - mseal (Linux >= 6.10): the worker's code and read-only data, and the kernel's vDSO (the clock
//    code every clock read runs), are sealed: mprotect, munmap, mremap and mmap(MAP_FIXED) over them
//    fail, so code cannot be made writable or replaced.
// Landlock confines the calling thread and the threads it starts later: call it from the thread
// that runs candidate code. Threads started earlier are not confined (the GPU driver's: a CUDA host
// callback of a candidate's runs on one of them; the kernel's ABI 8 can confine every thread at
// once, LANDLOCK_RESTRICT_SELF_TSYNC, not used yet). mseal holds for every thread.
// Each answers 0 or the errno of the failing call; ENOSYS or EOPNOTSUPP where the kernel lacks the
// feature (the worker then runs without it: the namespaces and seccomp still hold, and
// lockdown_support() tells which parts a machine has). Raw system calls only after fork.
#include <string>
#include <vector>

namespace turnrl::sandbox_detail {

int confine_writes_beneath(const std::vector<std::string>& folders);

// For a tool started without namespaces (rlimits-only: the compiler, which would otherwise print any
// file an #include names into its log): a Landlock ruleset under which files are read only beneath
// `readable` or `writable` and written only beneath `writable` (and /dev/null). Paths that do not
// exist are left out. Its descriptor (close-on-exec), or -errno (-ENOSYS without Landlock).
int ruleset_confining_reads(const std::vector<std::string>& readable, const std::vector<std::string>& writable);
// In the child after fork (raw system calls only): no new privileges, then the ruleset. 0 or errno.
int restrict_to_ruleset(int ruleset);

enum class SealScope {
  all_read_only_files,  // every mapping of a file that is not writable (CPU workers)
  own_executable,       // the worker executable's own mappings only (CUDA workers, whose driver
                        // loads and unloads libraries of its own later)
};
int seal_code(SealScope scope);

// mseal's system-call number (older headers and libseccomp releases do not know the call).
long mseal_number();

// After a shared object is loaded (relocated: CPU workers bind every symbol at load), seals its
// mappings that are not writable, so that its code cannot be made writable, patched inside a call
// and put back before the sampler's byte check reads it (code_sampler.h). 0, ENOSYS without mseal,
// or EPERM with `why` when a mapping of the file is writable and executable, or shared (code that
// changes through another mapping). absolute_path: the file's path as /proc/self/maps names it.
int seal_loaded_object(const std::string& absolute_path, std::string& why);

// The GOT slots of loaded libraries that stay writable after start-up (libraries linked without
// -z now, such as libstdc++ and libc; CPU workers run with LD_BIND_NOW=1, so every slot is bound before
// a candidate runs). A candidate that rewrites one (libstdc++'s malloc, say) has its code run
// wherever the harness allocates: after its call's closing mark, where it could finish deferred
// work. guard_library_gots copies every such slot into a page at a fixed address, read-only and
// sealed; library_gots_rewritten, after each candidate call, compares them and puts every slot back
// (no allocation, no call through a writable GOT). Returns the bytes guarded, or -errno.
long guard_library_gots();
bool library_gots_rewritten();

// Whether this machine's kernel has each part (probed without changing the calling process).
struct LockdownSupport {
  int landlock_abi = 0;  // 0: none
  bool mseal = false;
};
LockdownSupport lockdown_support();

}  // namespace turnrl::sandbox_detail
