#pragma once
// TrainConfig: one YAML file -> plain structs, one section per stage. Every stage's section is
// read by that stage's own read_options() (advantage, returns, mismatch, policy loss, reward,
// rejection, environment), so a key means the same thing in a config and in the stage's options
// struct; the trainer's own sections are defined here. Reading is strict: unknown keys, wrong
// types and out-of-range values throw turnrl::Error naming the key's path and what is allowed.
// Every key is documented in docs/configuration.md; `turnrl config --print-defaults` prints
// default_config_yaml().
#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "turnrl/kernels/kernel_env.h"
#include "turnrl/kernels/backends.h"
#include "turnrl/kernels/kernel_reward.h"
#include "turnrl/algo/rejection.h"
#include "turnrl/rl/engine_options.h"
#include "turnrl/rl/model_config.h"

namespace turnrl {

// Which tasks train.
struct TasksConfig {
  std::string source = "builtin";    // builtin (the CPU evaluator's tasks) | file (JSON Lines)
  std::string file;                  // source: file
  std::vector<std::string> include;  // task ids to use; empty = every task with a plan template
  double validation_fraction = 0.0;  // share held out for `turnrl eval` (split by a hash of the id)
  int64_t split_seed = 0;
};

// `turnrl eval`: sampling for evaluation and the reported statistics.
struct EvalConfig {
  int64_t samples = 8;  // episodes per task
  double temperature = 1.0;
  double top_p = 0.95;
  std::vector<double> pass_k = {1, 4};               // pass@k for these k (k <= samples)
  std::vector<double> fast_p = {1.0, 1.2, 1.5, 2.0};  // fast@p thresholds
  std::string split = "all";                          // all | validation | train
  int64_t seed = 1234;
};

// The generic engine's sections (EngineOptions) plus the kernel recipe's own.
struct TrainConfig : EngineOptions {
  ModelConfig model;
  TasksConfig tasks;
  KernelEnvOptions env = KernelEnvOptions().with_action(ActionFormat::plan).with_timing_trials(10);
  EvaluatorConfig evaluator;
  KernelRewardOptions reward;
  RejectionOptions rejection;
  EvalConfig eval;
};

// Reads a whole config from YAML (absent keys keep their defaults) and validates the
// combination. Throws turnrl::Error naming the key path.
TrainConfig parse_config(const YAML::Node& root);

// Loads `file` (empty: the defaults), applies `overrides` in order, then parse_config.
TrainConfig load_config(const std::string& file, const std::vector<std::string>& overrides = {});

// Every key with its value, as YAML that parse_config reads back to the same config. With
// `annotate`, each key carries a comment saying what it is and what is allowed.
std::string config_to_yaml(const TrainConfig& config, bool annotate = false);

// config_to_yaml(TrainConfig{}, true): what `turnrl config --print-defaults` prints.
std::string default_config_yaml();

}  // namespace turnrl
