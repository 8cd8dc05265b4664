#pragma once
// Subcommands of the turnrl program that live in their own files (src/cli/*.cpp); main.cpp
// dispatches to them. Each takes main's argc/argv (argv[1] is the subcommand) and returns the
// process exit status.
#include <string>
#include <vector>

// `turnrl eval-worker`: serves the remote evaluator's Redis stream with a local evaluator pool.
int eval_worker_command(int argc, char** argv);

// `turnrl import-kernelbench`: a KernelBench folder of problems -> a Python task file.
int import_kernelbench_command(int argc, char** argv);

// `turnrl train --nproc N`: runs this program's `train` as ranks 0..N-1 on this host (argv without
// --nproc, plus RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT as torchrun sets them,
// a free loopback port as the rendezvous). Returns 0 when every rank succeeded; when one fails, the
// others are stopped (SIGTERM) and its exit status is returned.
int launch_local_ranks(int nproc, const std::vector<std::string>& train_args);
