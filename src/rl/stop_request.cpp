#include "turnrl/rl/stop_request.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "turnrl/rl/distributed.h"

namespace turnrl {
namespace {

std::atomic<int> recorded_signal{0};  // lock-free, so the handler may touch it
std::atomic<int64_t> first_signal_ns{0};  // CLOCK_MONOTONIC when the recorded signal came

int64_t monotonic_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe (POSIX)
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

template <size_t N>
void say(const char (&text)[N]) {
  (void)!::write(STDERR_FILENO, text, N - 1);
}

// Only async-signal-safe calls here: atomics, clock_gettime(), write() and _exit().
void on_stop_signal(int signal) {
  int expected = 0;
  if (recorded_signal.compare_exchange_strong(expected, signal)) {
    first_signal_ns.store(monotonic_ns());
    constexpr char kFirst[] = "\nturnrl: stop requested; finishing the current step (send the signal again to stop now)\n";
    say(kFirst);
    return;
  }
  if (monotonic_ns() - first_signal_ns.load() < kRepeatedStopWindowNs) {
    constexpr char kSame[] = "\nturnrl: the stop signal again within a second, taken as the same request; still finishing the step\n";
    say(kSame);
    return;
  }
  constexpr char kSecond[] = "\nturnrl: second stop signal; exiting now without a checkpoint\n";
  say(kSecond);
  ::_exit(128 + signal);
}

}  // namespace

void install_stop_handlers() {
  recorded_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a blocking read in the step goes on; the loop polls afterwards
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int stop_signal() { return recorded_signal.load(); }

int agreed_stop_signal(Communicator* comm) {
  if (!comm) return stop_signal();
  int agreed = 0;
  for (const std::string& theirs : comm->all_gather(std::to_string(stop_signal())))
    if (agreed == 0) agreed = std::stoi(theirs);
  recorded_signal.store(agreed);  // the program's exit status follows the ranks' common decision
  return agreed;
}

void request_stop(int signal) {
  first_signal_ns.store(monotonic_ns());
  recorded_signal.store(signal);
}

}  // namespace turnrl
