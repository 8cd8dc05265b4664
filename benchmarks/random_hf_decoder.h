#pragma once
// A random HFDecoder of a given config for benchmarks: weights normal(0, 0.02), norms one, eval mode.
#include <string>

#include "turnrl/model/hf_decoder.h"

namespace turnrl::bench {

inline HFDecoder random_decoder(const HFConfig& config, torch::Dtype dtype, torch::Device device) {
  HFDecoder model(config, torch::TensorOptions(dtype).device(device));
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters())
    p.key().find("norm") != std::string::npos ? p.value().fill_(1.0) : p.value().normal_(0.0, 0.02);
  model->eval();
  return model;
}

}  // namespace turnrl::bench
