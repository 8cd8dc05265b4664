// The training step of an HF policy at LLM size: forward + backward tokens/s of
// HFPolicy::forward_logp (chunked log-probs, compute in the parameters' dtype) against the same
// step through full-vocabulary logits (token_logp_from_logits over the whole [B, T, V], the
// baseline, same run); the full RL step as RL needs it (bf16 compute, float32 master weights and
// AdamW states, gradient clipping); and the peak memory of one long sequence with chunked
// log-probs and activation checkpointing, against the same without checkpointing; and the
// rollout/trainer log-prob mismatch with the engine's KV cache in the model's dtype and in fp8.
// benchmarks/device/train_step_bench.py is the transformers baseline of the same shape;
// benchmarks/device/train_step_bench.sh runs both and prints the ratio.
//
//   train_step_bench [--device cpu|cuda] [--quick] [--profile]
// --profile: one more fused forward + backward under the profiler, and the kernels that took the
//   most time (device_profile.h).
// cuda: bf16, Qwen3-1.7B's shape (hidden 2048, 28 layers, 16 / 8 heads x 128, ffn 6144, vocab
// 151,936, tied), B=8 T=1024, and T=8192 for the memory rows. cpu: fp32, qwen3-tiny's shape with a
// 4,096-entry vocabulary, B=2 T=64 (a smoke run).
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/version.h>

#ifdef TURNRL_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "bench_util.h"
#include "device_profile.h"
#include "turnrl/model/hf_init.h"
#include "turnrl/model/hf_policy.h"
#include "turnrl/rl/master_weights.h"

using namespace turnrl;

namespace {

HFDecoder random_decoder(const HFConfig& config, torch::Dtype dtype, torch::Device device) {
  HFDecoder model(config, torch::TensorOptions(dtype).device(device));
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters())
    p.key().find("norm") != std::string::npos ? p.value().fill_(1.0) : p.value().normal_(0.0, 0.02);
  return model;
}

// One training forward + backward: the mean log-prob of every token (as a language-model loss).
void forward_backward(HFPolicy& policy, const torch::Tensor& tokens, bool full_logits) {
  const TokenLogp t = full_logits ? token_logp_from_logits(policy.model()->forward(tokens), tokens)
                                  : policy.forward_logp(tokens);
  (-t.logp.sum() / double(tokens.numel())).backward();
}

// Peak bytes allocated on the device while fn runs (CUDA builds; -1 elsewhere).
double peak_bytes(const torch::Device& device, const std::function<void()>& fn) {
#ifdef TURNRL_WITH_CUDA
  if (device.is_cuda()) {
    const c10::DeviceIndex index = device.index() < 0 ? 0 : device.index();
    bench::synchronize(device);
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
    fn();
    bench::synchronize(device);
    return double(c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].peak);
  }
#endif
  fn();
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  const bool large = args.device.is_cuda() && !args.quick;
  const torch::Dtype dtype = args.device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  const HFConfig config =
      // Shapes only: the bos/eos ids are Qwen3's (151643) for the real vocabulary, 0 for the small one.
      parse_hf_config(large ? hf_preset_config("qwen3-1.7b", HfPresetVocab{151669, 151643, 151643})
                            : hf_preset_config("qwen3-tiny", HfPresetVocab{4096, 0, 0}),
                      "preset");
  const int64_t batch = large ? 8 : 2, length = large ? 1024 : 64, long_length = large ? 8192 : 256;
  const int max_reps = args.device.is_cuda() ? 10 : 3;

  torch::manual_seed(0);
  HFPolicy policy(random_decoder(config, dtype, args.device));
  policy.train();
  int64_t parameters = 0;
  for (const auto& p : policy.parameters()) parameters += p.numel();
  std::printf("train_step_bench on %s (%d threads), %s, LibTorch %s\n", args.device.str().c_str(), at::get_num_threads(),
              c10::toString(dtype), TORCH_VERSION);
  std::printf("model: Qwen3-shaped, %.3fB parameters, hidden %ld, %ld layers, %ld heads / %ld KV heads x %ld, ffn %ld, "
              "vocab %ld, logp chunk %ld positions\n\n",
              double(parameters) / 1e9, long(config.hidden_size), long(config.num_hidden_layers),
              long(config.num_attention_heads), long(config.num_key_value_heads), long(config.head_dim),
              long(config.intermediate_size), long(config.vocab_size), long(policy.logp_chunk_size()));
  std::printf("%-52s | %12s | %-36s %12s | %6s\n", "case", "tokens/s", "baseline (same run)", "tokens/s", "ratio");

  const auto tokens_of = [&](int64_t rows, int64_t cols) {
    return torch::randint(0, config.vocab_size, {rows, cols}, torch::TensorOptions(torch::kLong).device(args.device));
  };
  const torch::Tensor tokens = tokens_of(batch, length);
  const double n = double(batch * length);
  const auto time = [&](const std::function<void()>& fn) { return bench::median_seconds(fn, args.device, 0.5, max_reps, 1); };
  const auto clear_grads = [&] {
    for (auto& p : policy.parameters()) p.mutable_grad() = torch::Tensor();
  };
  const double chunked = time([&] { forward_backward(policy, tokens, false); clear_grads(); });
  const double full = time([&] { forward_backward(policy, tokens, true); clear_grads(); });
  std::printf("%-52s | %12.0f | %-36s %12.0f | %6.2f\n",
              fmt::format("fwd+bwd forward_logp B={} T={}", batch, length).c_str(), n / chunked,
              "full-vocabulary logits", n / full, full / chunked);
  policy.model()->set_activation_checkpointing(true);
  const double checkpointed = time([&] { forward_backward(policy, tokens, false); clear_grads(); });
  policy.model()->set_activation_checkpointing(false);
  std::printf("%-52s | %12.0f | %-36s %12.0f | %6.2f\n", "  + activation checkpointing", n / checkpointed,
              "without checkpointing", n / chunked, chunked / checkpointed);
  policy.model()->set_fused_kernels(true);
  const double fused = time([&] { forward_backward(policy, tokens, false); clear_grads(); });
  const double fused_full = time([&] { forward_backward(policy, tokens, true); clear_grads(); });
  // On a CPU build the two are one path (the fused kernels need CUDA).
  std::printf("%-52s | %12.0f | %-36s %12.0f | %6.2f\n", "  + fused kernels (model.fused_kernels)", n / fused,
              "without", n / chunked, chunked / fused);
  std::printf("%-52s | %12.0f | %-36s %12.0f | %6.2f\n", "  full-vocabulary logits + fused kernels", n / fused_full,
              "without fused kernels", n / full, full / fused_full);
  if (args.profile)
    bench::print_device_profile("fused forward + backward", [&] { forward_backward(policy, tokens, false); clear_grads(); },
                                args.device);

  {
    // The trainer's optimizer side (Trainer::update): float32 masters and AdamW states, on the
    // trainer's default path (fused kernels).
    MasterWeights masters(policy.parameters());
    torch::optim::AdamW optimizer(masters.masters(), torch::optim::AdamWOptions(1e-6).weight_decay(0.01));
    const double rl_step = time([&] {
      forward_backward(policy, tokens, false);
      masters.gather_gradients();
      torch::nn::utils::clip_grad_norm_(masters.masters(), 1.0);
      optimizer.step();
      masters.publish();
    });
    std::printf("%-52s | %12.0f | %-36s %12.0f | %6.2f\n", "RL step: + fp32 master AdamW, clip 1.0 (fused)",
                n / rl_step, "fused fwd+bwd alone", n / fused, fused / rl_step);
  }
  policy.model()->set_fused_kernels(false);

  // One long sequence: peak memory of the step, against full-vocabulary logits (baseline).
  const torch::Tensor long_tokens = tokens_of(1, long_length);
  std::printf("\npeak memory, B=1 T=%ld fwd+bwd (GiB allocated, weights included)\n", long(long_length));
  struct MemoryCase {
    const char* name;
    bool full_logits, checkpointing;
  };
  for (const MemoryCase& c : {MemoryCase{"chunked log-probs, activation checkpointing", false, true},
                              MemoryCase{"chunked log-probs", false, false},
                              MemoryCase{"full-vocabulary logits (baseline)", true, false}}) {
    policy.model()->set_activation_checkpointing(c.checkpointing);
    try {
      const double peak =
          peak_bytes(args.device, [&] { forward_backward(policy, long_tokens, c.full_logits); clear_grads(); });
      if (peak < 0)
        std::printf("  %-46s not measured on %s\n", c.name, args.device.str().c_str());
      else
        std::printf("  %-46s %8.2f\n", c.name, peak / double(1 << 30));
    } catch (const c10::Error& e) {
      std::printf("  %-46s failed: %s\n", c.name, e.what_without_backtrace());
    }
  }
  policy.model()->set_activation_checkpointing(false);

  // Rollout/trainer mismatch: the sampler's recorded log-probs against forward_logp's (the
  // quantity mismatch correction exists for; the trainer logs it per step as mismatch/*), with the
  // engine's cache in the model's dtype and as fp8 e4m3 codes (kv_cache_dtype).
  for (const KVCacheDtype storage : {KVCacheDtype::model, KVCacheDtype::fp8_e4m3}) {
    policy.engine_options(GenerationEngineOptions().slots(0).capacity(0).kv_cache_dtype(storage));
    const int64_t prompts = large ? 8 : 2, prompt_length = large ? 256 : 16, new_tokens = large ? 256 : 16;
    const Rollout r = policy.generate(tokens_of(prompts, prompt_length), {},
                                      SamplingOptions().max_new(new_tokens).rng_seed(1));
    torch::NoGradGuard no_grad;
    const torch::Tensor trainer = policy.forward_logp(r.tokens, r.attention_mask, r.response_mask).logp;
    const torch::Tensor mask = r.response_mask;
    const torch::Tensor diff = (trainer - r.logp.to(torch::kFloat)).masked_select(mask);
    std::printf("%srollout vs trainer log-probs (%ld response tokens, %s, KV cache %s): mean |diff| %.3g, max |diff| "
                "%.3g, mean (rollout - trainer) %.3g\n",
                storage == KVCacheDtype::model ? "\n" : "", long(diff.numel()), c10::toString(dtype),
                storage == KVCacheDtype::model ? c10::toString(dtype) : "fp8 e4m3", diff.abs().mean().item<double>(),
                diff.abs().max().item<double>(), (-diff).mean().item<double>());
  }
  std::printf("\nratio > 1: turnrl's path is faster than the baseline.\n");
  return 0;
}
