#pragma once
// Loading a module's parameters and buffers from a LibTorch archive by copying into the existing
// tensors. torch::nn::Module::load re-seats each tensor on the stored storage, which keeps a
// stored fp32 storage under a bf16 tensor (garbage values); copying converts dtype and device
// and keeps the tensors an optimizer already holds.
#include <string>

#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>

namespace turnrl::detail {

// Throws turnrl::Error naming the tensor (and `path`) when one is missing or has another shape.
void copy_module_state(torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& path,
                       const std::string& prefix = "");

}  // namespace turnrl::detail
