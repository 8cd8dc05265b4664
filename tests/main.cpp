// The tests' main: Catch2's runner, plus a fatal-signal handler that prints a backtrace (with
// symbol names: test programs link with -rdynamic) before the process dies, so that a crash on a
// machine without a debugger still says where it happened. Catch's own signal handling is off for
// that reason; ctest still reports the crash as SEGFAULT/SIGABRT.
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#include <catch2/catch.hpp>

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

namespace {

void print_backtrace_and_die(int sig) {
  static const char header[] = "\n*** fatal signal in a test; backtrace:\n";
  (void)!write(STDERR_FILENO, header, sizeof header - 1);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, print_backtrace_and_die);
  return Catch::Session().run(argc, argv);
}
