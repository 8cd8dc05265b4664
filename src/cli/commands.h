#pragma once
// Subcommands of the turnrl program that live in their own files (src/cli/*.cpp); main.cpp
// dispatches to them. Each takes main's argc/argv (argv[1] is the subcommand) and returns the
// process exit status.

// `turnrl eval-worker`: serves the remote evaluator's Redis stream with a local evaluator pool.
int eval_worker_command(int argc, char** argv);

// `turnrl import-kernelbench`: a KernelBench folder of problems -> a Python task file.
int import_kernelbench_command(int argc, char** argv);
