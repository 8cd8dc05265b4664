#include "turnrl/rl/stop_request.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "turnrl/rl/distributed.h"

namespace turnrl {
namespace {

std::atomic<int> recorded_signal{0};  // lock-free, so the handler may touch it

// Only async-signal-safe calls here: an atomic store, write() and _exit().
void on_stop_signal(int signal) {
  int expected = 0;
  if (recorded_signal.compare_exchange_strong(expected, signal)) {
    constexpr char kFirst[] = "\nturnrl: stop requested; finishing the current step (send the signal again to stop now)\n";
    (void)!::write(STDERR_FILENO, kFirst, sizeof kFirst - 1);
    return;
  }
  constexpr char kSecond[] = "\nturnrl: second stop signal; exiting now without a checkpoint\n";
  (void)!::write(STDERR_FILENO, kSecond, sizeof kSecond - 1);
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

void request_stop(int signal) { recorded_signal.store(signal); }

}  // namespace turnrl
