#include "module_state.h"

#include <torch/utils.h>

#include "turnrl/core/error.h"

namespace turnrl::detail {

namespace {

void copy_tensor(torch::Tensor& target, torch::serialize::InputArchive& archive, const std::string& key,
                 bool is_buffer, const std::string& path, const std::string& prefix) {
  torch::Tensor stored;
  if (!archive.try_read(key, stored, is_buffer)) fail("load '{}': tensor '{}{}' is missing", path, prefix, key);
  if (stored.sizes() != target.sizes())
    fail("load '{}': tensor '{}{}' has shape {} there, {} here", path, prefix, key, c10::str(stored.sizes()),
         c10::str(target.sizes()));
  target.copy_(stored);
}

}  // namespace

void copy_module_state(torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& path,
                       const std::string& prefix) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters(/*recurse=*/false)) copy_tensor(p.value(), archive, p.key(), false, path, prefix);
  for (auto& b : module.named_buffers(/*recurse=*/false)) copy_tensor(b.value(), archive, b.key(), true, path, prefix);
  for (const auto& child : module.named_children()) {
    torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive))
      fail("load '{}': module '{}{}' is missing", path, prefix, child.key());
    copy_module_state(*child.value(), child_archive, path, prefix + child.key() + ".");
  }
}

}  // namespace turnrl::detail
