#pragma once
// The tiny HuggingFace checkpoints of tests/data/hf (benchmarks/device/make_hf_fixtures.py) and
// scratch folders for the HF model tests.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "turnrl/core/filesystem.h"
#include "turnrl/model/hf_policy.h"
#include "turnrl/model/safetensors.h"

namespace turnrl::test {

inline const std::vector<std::string>& hf_families() {
  static const std::vector<std::string> families = {"qwen2", "qwen3", "llama"};
  return families;
}

inline std::string hf_fixture(const std::string& family) { return std::string(TURNRL_TEST_DATA_DIR) + "/hf/" + family; }

// A fresh, empty folder under the temporary directory, removed when the object goes.
struct ScratchFolder {
  explicit ScratchFolder(const std::string& name)
      : path((std::filesystem::temp_directory_path() / ("turnrl_hf_" + std::to_string(getpid()) + "_" + name)).string()) {
    turnrl::remove_tree(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchFolder() { turnrl::remove_tree(path); }
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

struct HFReference {
  std::vector<std::vector<int64_t>> prompts, greedy;
  std::vector<torch::Tensor> logits;  // float32 [T, vocab] per prompt
  std::string generator;
};

inline HFReference read_hf_reference(const std::string& family) {
  std::ifstream in(hf_fixture(family) + "/reference.json");
  const nlohmann::json json = nlohmann::json::parse(in);
  HFReference r;
  r.prompts = json["prompts"].get<std::vector<std::vector<int64_t>>>();
  r.greedy = json["greedy"].get<std::vector<std::vector<int64_t>>>();
  r.generator = json["generator"].get<std::string>();
  const SafetensorsFile logits(hf_fixture(family) + "/reference.safetensors");
  for (size_t i = 0; i < r.prompts.size(); ++i) r.logits.push_back(logits.view("logits." + std::to_string(i)).clone());
  return r;
}

inline std::unique_ptr<HFPolicy> load_fixture(const std::string& family, torch::Dtype dtype = torch::kFloat,
                                              const LoraOptions& lora = {}) {
  return load_hf_policy(HFModelOptions().path(hf_fixture(family)).dtype(dtype).lora(lora));
}

// A fixture's policy on the GPU, what the CUDA tests run.
inline std::unique_ptr<HFPolicy> load_gpu_fixture(const std::string& family, torch::Dtype dtype = torch::kFloat) {
  std::unique_ptr<HFPolicy> policy = load_fixture(family, dtype);
  policy->to(torch::kCUDA);
  return policy;
}

inline torch::Tensor row(const std::vector<int64_t>& tokens) { return torch::tensor(tokens, torch::kLong).unsqueeze(0); }

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().max().item<double>();
}

// The largest |x - reference| over a list of tensors, each relative to its reference's max |value|.
inline double worst_relative_difference(const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& reference) {
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double scale = reference[i].abs().max().item<double>();
    worst = std::max(worst, max_abs_diff(x[i], reference[i]) / std::max(scale, 1e-30));
  }
  return worst;
}

// Logits [T, vocab] of one unpadded sequence, without autograd.
inline torch::Tensor logits_of(HFPolicy& policy, const std::vector<int64_t>& prompt) {
  torch::NoGradGuard no_grad;
  return policy.model()->forward(row(prompt))[0];
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace turnrl::test
