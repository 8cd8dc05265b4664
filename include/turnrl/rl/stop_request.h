#pragma once
// A graceful stop on SIGINT / SIGTERM: the first signal only records itself, and the training
// loop, which polls stop_signal() after each finished step, checkpoints (checkpoint.on_stop) and
// returns; the program then exits with 128 + the signal (130, 143, as shells expect). A second
// signal means "now": the process exits at once with the same status, writing nothing more. A
// repeat within kRepeatedStopWindowNs of the first is the same request delivered twice and does
// not count: timeout(1) signals its child and then the child's process group, and a terminal's
// Ctrl-C reaches both `turnrl train --nproc`'s launcher and its ranks, which the launcher signals
// too; taken as "now", either would lose the checkpoint the stop was meant to write.
//
//   install_stop_handlers();          // once, in the program (a library never takes signals itself)
//   trainer.train(resume);            // returns early after a signal
//   if (int sig = stop_signal()) return 128 + sig;
#include <cstdint>

namespace turnrl {

class Communicator;

constexpr int64_t kRepeatedStopWindowNs = 1000000000;  // 1 s

// Installs the handlers for SIGINT and SIGTERM (replacing the previous ones) and clears any
// recorded signal.
void install_stop_handlers();

// The signal that asked for a stop (SIGINT or SIGTERM), or 0 when none came.
int stop_signal();

// The stop signal as every rank agrees on it (the first non-zero one over the ranks; one rank's
// signal stops all, so no rank waits in a collective for one that left). comm == nullptr: this
// process's own. A collective call when comm is set: every rank calls it at the same point.
int agreed_stop_signal(Communicator* comm);

// Records `signal` as if it had been delivered (for callers that stop for their own reasons,
// and for tests); 0 clears the record.
void request_stop(int signal);

}  // namespace turnrl
