#pragma once
// SFTConfig: `turnrl sft`'s config, one YAML file -> the SFT loop's sections (sft.h) and the model it
// trains (model_config.h). Its run, optimizer and checkpoint sections are the training config's,
// key for key; data and sft are its own. Reading is strict (unknown keys, wrong types and
// out-of-range values name the key); each section is described once (core/config_fields.h).
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "turnrl/rl/model_config.h"
#include "turnrl/rl/sft.h"

namespace turnrl {

struct SFTConfig : SFTOptions {
  ModelConfig model;
};

// Checks across sections (model.max_seq >= data.max_length) included. Throws turnrl::Error.
SFTConfig parse_sft_config(const YAML::Node& root);
// `file` (empty: the defaults) with `overrides` ("key.path=value") applied; errors name the --set
// or the file.
SFTConfig load_sft_config(const std::string& file, const std::vector<std::string>& overrides = {});
// Every key with its value (annotated: with its help), as YAML that parse_sft_config reads back.
std::string sft_config_to_yaml(const SFTConfig& config, bool annotate = false);
// sft_config_to_yaml(SFTConfig{}, true): `turnrl config --print-defaults --sft`.
std::string default_sft_config_yaml();

}  // namespace turnrl
