// The tests' main: Catch2's runner, plus a fatal-signal handler that prints where the fault was
// (faulting address, instruction pointer and the shared object holding it, which still names the
// library when the stack cannot be unwound, e.g. in JIT-generated code) and a backtrace (with
// symbol names: test programs link with -rdynamic) before the process dies, so that a crash on a
// machine without a debugger still says where it happened. Catch's own signal handling is off for
// that reason; ctest still reports the crash as SEGFAULT/SIGABRT.
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>

namespace {

void print_fault_and_die(int sig, siginfo_t* info, void* context) {
  char line[512];
  const void* ip = nullptr;
#if defined(__x86_64__)
  ip = reinterpret_cast<const void*>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  ip = reinterpret_cast<const void*>(static_cast<ucontext_t*>(context)->uc_mcontext.pc);
#endif
  Dl_info where{};
  const bool known = ip && dladdr(ip, &where) && where.dli_fname;
  const int n = std::snprintf(line, sizeof line,
                              "\n*** fatal signal %d in a test: fault address %p, instruction %p in %s (%s+%#lx), "
                              "thread %ld\n",
                              sig, info ? info->si_addr : nullptr, ip, known ? where.dli_fname : "unmapped code",
                              known && where.dli_sname ? where.dli_sname : "?",
                              known && where.dli_saddr ? static_cast<unsigned long>(static_cast<const char*>(ip) -
                                                                                    static_cast<const char*>(where.dli_saddr))
                                                       : 0ul,
                              static_cast<long>(gettid()));
  (void)!write(STDERR_FILENO, line, size_t(n > 0 ? n : 0));
#if defined(__x86_64__)
  // A jump through a null or wild pointer leaves nothing to unwind: the words on top of the stack
  // (the caller's return address among them) still name the caller.
  const auto* sp = reinterpret_cast<void* const*>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RSP]);
  for (int i = 0; sp && i < 12; ++i) {
    Dl_info w{};
    if (dladdr(sp[i], &w) && w.dli_fname) {
      const int m = std::snprintf(line, sizeof line, "  stack[%d] %p %s (%s)\n", i, sp[i], w.dli_fname,
                                  w.dli_sname ? w.dli_sname : "?");
      (void)!write(STDERR_FILENO, line, size_t(m > 0 ? m : 0));
    }
  }
#endif
  void* frames[64];
  const int count = backtrace(frames, 64);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  // An alternate stack, so that a stack overflow still gets its report.
  static char alt_stack[1 << 16];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = print_fault_and_die;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
  return Catch::Session().run(argc, argv);
}
