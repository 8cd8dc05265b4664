#pragma once
// The subcommands of the turnrl program. main.cpp builds one CLI11 parser; each add_*_command
// registers a subcommand with its options, its --help text (with an example) and the callback that
// runs it. A callback that must end the program with a non-zero status throws CLI::RuntimeError.
#include <string>
#include <vector>

namespace CLI {
class App;
class Validator;
}

namespace turnrl::cli {

// `train` (with --nproc, --resume) and `eval` (a checkpoint on the validation tasks).
void add_train_commands(CLI::App& app);
// `sft`: supervised fine-tuning on chat conversations, with --resume.
void add_sft_command(CLI::App& app);
// `evaluate-kernel`: one candidate through the evaluator, reward and feedback printed.
void add_evaluate_kernel_command(CLI::App& app);
// `plot`: metrics.jsonl files -> PNG line charts.
void add_plot_command(CLI::App& app);
// `config`: the resolved config or every default, annotated.
void add_config_command(CLI::App& app);
// `eval-worker`: serves the remote evaluator's Redis stream with a local evaluator pool.
void add_eval_worker_command(CLI::App& app);
// `import-kernelbench`: a KernelBench folder of problems -> a Python task file.
void add_import_kernelbench_command(CLI::App& app);
// init-model: a random HuggingFace model folder from a preset.
void add_init_model_command(CLI::App& app);

// `make-sft-data`: multi-turn SFT conversations for a config's tasks, checked by the evaluator.
void add_make_sft_data_command(CLI::App& app);
// `trim-vocab`: a tokenizer folder cut down to the tokens of a corpus.
void add_trim_vocab_command(CLI::App& app);

// The repeatable `--set key.path=value` option every config-reading subcommand takes.
void add_config_overrides(CLI::App& command, std::vector<std::string>& sets);

// A CONFIG option's transform: a path that is not a readable file names a shipped config
// (configs/<name>[.yaml] among turnrl's data, core/install_paths.h), so that an installed turnrl
// runs `turnrl train cpu_default` (or configs/cpu_default.yaml) from any folder.
CLI::Validator shipped_config();

// An integer option's check: "'0' is not allowed; allowed: an integer in [1, 1024]".
CLI::Validator integer_in(long lo, long hi);

// `turnrl --version`: version, git commit, LibTorch version, backends and NCCL in this build.
std::string version_text();

// `turnrl train --nproc N`: runs this program's `train` as ranks 0..N-1 on this host (argv without
// --nproc, plus RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT as torchrun sets them,
// a free loopback port as the rendezvous). Returns 0 when every rank succeeded; when one fails, the
// others are stopped (SIGTERM) and its exit status is returned.
int launch_local_ranks(int nproc, const std::vector<std::string>& train_args);

}  // namespace turnrl::cli
