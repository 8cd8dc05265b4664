// Your own torch::nn::Module as the policy, trained on a kernel task by the same Trainer: a bigram
// language model over the byte chat tokenizer behind ModulePolicy, writing code actions that the
// CPU evaluator judges (configs/cpu_code_actions.yaml). The kernel recipe builds everything else
// (KernelEnv pools, the chat codec, the stages); only the policy is swapped. A model this small
// writes no valid C++, so the turns are format failures: the program shows the plumbing.
//
//   build/bin/own_policy [CONFIG] [--set key=value ...]      (default: configs/cpu_code_actions.yaml)
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <turnrl/model/policy.h>
#include <turnrl/kernels/kernel_recipe.h>

using namespace turnrl;

// Logits of the next token from the current and the previous one. Any module works that maps
// (tokens int64 [B, T], attention_mask bool [B, T]) to logits [B, T, V] causally.
struct BigramLMImpl : torch::nn::Module {
  BigramLMImpl(int64_t vocab, int64_t width)
      : current(register_module("current", torch::nn::Embedding(vocab, width))),
        previous(register_module("previous", torch::nn::Embedding(vocab, width))),
        out(register_module("out", torch::nn::Linear(width, vocab))) {}

  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& /*attention_mask*/) {
    const torch::Tensor shifted = torch::cat({tokens.narrow(1, 0, 1), tokens.narrow(1, 0, tokens.size(1) - 1)}, 1);
    return out(torch::tanh(current(tokens) + previous(shifted)));
  }

  torch::nn::Embedding current, previous;
  torch::nn::Linear out;
};
TORCH_MODULE(BigramLM);

int main(int argc, char** argv) {
  std::string config_file = "configs/cpu_code_actions.yaml";
  std::vector<std::string> overrides = {"trainer.steps=2",         "trainer.tasks_per_step=1", "trainer.samples_per_task=2",
                                        "sampling.max_new_tokens=32", "run.dir=runs/own_policy", "run.progress=false"};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set" && i + 1 < argc) overrides.push_back(argv[++i]);
    else config_file = arg;
  }
  try {
    KernelRecipe recipe = kernel_recipe(load_config(config_file, overrides));
    torch::manual_seed(uint64_t(recipe.config.trainer.seed));
    BigramLM lm(recipe.tokenizer->vocab_size(), 64);
    recipe.parts.policy = std::make_shared<ModulePolicy>(ModulePolicy::wrap(lm.ptr()));
    Trainer trainer(recipe.parts);
    const std::vector<torch::Tensor> before = [&] {
      std::vector<torch::Tensor> out;
      for (const auto& p : trainer.policy().parameters()) out.push_back(p.detach().clone());
      return out;
    }();
    for (int64_t step = 0; step < recipe.config.trainer.steps; ++step) {
      const Metrics m = trainer.train_step();
      std::printf("step %lld: reward %.3f  format failures %.0f of %.0f turns  trained rows %.0f\n",
                  static_cast<long long>(step + 1), m.at("reward/mean"), m.at("kernel/format"), m.at("rollout/turns"),
                  m.count("actor/rows") ? m.at("actor/rows") : 0.0);
    }
    double moved = 0;
    const std::vector<torch::Tensor> after = trainer.policy().parameters();
    for (size_t i = 0; i < after.size(); ++i) moved = std::max(moved, (after[i] - before[i]).abs().max().item<double>());
    std::printf("largest parameter change: %.3g\n", moved);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "own_policy: %s\n", e.what());
    return 1;
  }
  return 0;
}
