// HFDecoder throughput (a random Qwen3-shaped model built from a config.json text, no files):
// forward tokens/s of a training micro-batch against the built-in TransformerPolicy of the same
// width, depth and heads (baseline: turnrl's own decoder, measured in the same run; the HF one
// adds GQA, q/k norms and transformers' exact numerics), and KV-cache generation tokens/s against
// recomputing the whole sequence each step (baseline, same run), and forward_logp with a response
// mask on the full Qwen3 vocabulary (qwen3-tiny's shape: the vocabulary projection is most of the
// cost) against projecting every position, the prompt's too (baseline, same run).
//
//   hf_model_bench [--device cpu|cuda] [--quick]
// cpu: fp32, hidden 256, 2 layers; cuda: bf16, Qwen3-0.6B's shape (hidden 1024, 28 layers,
// 16 heads, 8 KV heads, head_dim 128, vocab 151,936).
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <torch/version.h>

#include "bench_util.h"
#include "random_hf_decoder.h"
#include "turnrl/model/hf_policy.h"
#include "turnrl/model/transformer.h"

using namespace turnrl;

namespace {

std::string qwen3_config(int hidden, int layers, int heads, int kv, int head_dim, int inter, int vocab) {
  return fmt::format(
      R"({{"architectures": ["Qwen3ForCausalLM"], "vocab_size": {}, "hidden_size": {}, "intermediate_size": {},
          "num_hidden_layers": {}, "num_attention_heads": {}, "num_key_value_heads": {}, "head_dim": {},
          "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": false}})",
      vocab, hidden, inter, layers, heads, kv, head_dim);
}

std::string qwen3_config(bool large) {
  return large ? qwen3_config(1024, 28, 16, 8, 128, 3072, 151936) : qwen3_config(256, 2, 8, 2, 32, 704, 4096);
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  const bool large = args.device.is_cuda() && !args.quick;
  const torch::Dtype dtype = args.device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  const HFConfig config = parse_hf_config(qwen3_config(large), "benchmark config");
  // CPU sizes stay small: the recompute baseline is quadratic in the length.
  const int64_t batch = large ? 8 : 2, length = large ? 1024 : 64;
  const int64_t gen_batch = large ? 32 : 2, prompt = large ? 256 : 16, new_tokens = large ? 128 : 8;
  const int max_reps = args.device.is_cuda() ? 20 : 5;

  torch::manual_seed(0);
  HFDecoder model = bench::random_decoder(config, dtype, args.device);
  HFPolicy policy(model);
  TransformerPolicy builtin(TransformerOptions()
                                .vocab(config.vocab_size)
                                .d_model(config.num_attention_heads * config.head_dim)
                                .layers(config.num_hidden_layers)
                                .heads(config.num_attention_heads)
                                .ffn(config.intermediate_size)
                                .max_seq(8192)
                                .dtype(dtype),
                            args.device);
  builtin.eval();

  std::printf("hf_model_bench on %s (%d threads), %s, LibTorch %s\n", args.device.str().c_str(), at::get_num_threads(),
              c10::toString(dtype), TORCH_VERSION);
  std::printf("model: Qwen3-shaped, hidden %ld, %ld layers, %ld heads / %ld KV heads x %ld, ffn %ld, vocab %ld\n\n",
              long(config.hidden_size), long(config.num_hidden_layers), long(config.num_attention_heads),
              long(config.num_key_value_heads), long(config.head_dim), long(config.intermediate_size),
              long(config.vocab_size));
  std::printf("%-46s | %12s | %-40s %12s | %6s\n", "case", "tokens/s", "baseline (same run)", "tokens/s", "ratio");

  const torch::Tensor tokens =
      torch::randint(0, config.vocab_size, {batch, length}, torch::TensorOptions(torch::kLong).device(args.device));
  torch::NoGradGuard no_grad;
  const double hf_forward = bench::median_seconds([&] { policy.forward_logp(tokens); }, args.device, 0.2, max_reps, 1);
  const double builtin_forward = bench::median_seconds([&] { builtin.forward_logp(tokens); }, args.device, 0.2, max_reps, 1);
  const double n = double(batch * length);
  std::printf("%-46s | %12.0f | %-40s %12.0f | %6.2f\n",
              fmt::format("forward_logp B={} T={}", batch, length).c_str(), n / hf_forward,
              "built-in TransformerPolicy, same shape", n / builtin_forward, builtin_forward / hf_forward);

  const torch::Tensor prompts =
      torch::randint(0, config.vocab_size, {gen_batch, prompt}, torch::TensorOptions(torch::kLong).device(args.device));
  const auto generate = [&](bool cache) {
    const SamplingOptions o = SamplingOptions().max_new(new_tokens).rng_seed(1).cache(cache);
    return bench::median_seconds([&] { policy.generate(prompts, {}, o); }, args.device, 0.2, max_reps, 1);
  };
  const double cached = generate(true), recompute = generate(false);
  const double generated = double(gen_batch * new_tokens);
  std::printf("%-46s | %12.0f | %-40s %12.0f | %6.2f\n",
              fmt::format("generate kv-cache B={} P={} N={}", gen_batch, prompt, new_tokens).c_str(),
              generated / cached, "recompute the sequence every step", generated / recompute, recompute / cached);

  // A turn as the trainer scores it: a long prompt, the policy's response the last eighth.
  const HFConfig tiny = parse_hf_config(qwen3_config(128, 4, 4, 2, 32, 384, 151936), "qwen3-tiny config");
  HFDecoder tiny_model = bench::random_decoder(tiny, dtype, args.device);
  HFPolicy tiny_policy(tiny_model);
  const int64_t turn_length = args.quick ? 256 : 512, turns = 2;
  const torch::Tensor turn_tokens =
      torch::randint(0, tiny.vocab_size, {turns, turn_length}, torch::TensorOptions(torch::kLong).device(args.device));
  torch::Tensor response = torch::zeros({turns, turn_length}, torch::TensorOptions(torch::kBool).device(args.device));
  response.narrow(1, turn_length - turn_length / 8, turn_length / 8).fill_(true);
  const double masked = bench::median_seconds([&] { tiny_policy.forward_logp(turn_tokens, {}, response); }, args.device, 0.2, max_reps, 1);
  const double every_position = bench::median_seconds(
      [&] { token_logp_from_logits(tiny_model->forward(turn_tokens), turn_tokens, response); }, args.device, 0.2, max_reps, 1);
  const double scored = double(turns * turn_length);
  std::printf("%-46s | %12.0f | %-40s %12.0f | %6.2f\n",
              fmt::format("forward_logp qwen3-tiny, response T/8, T={}", turn_length).c_str(), scored / masked,
              "vocabulary projection at every position", scored / every_position, every_position / masked);
  std::printf("\nratio > 1: the HF decoder (or its KV cache) is faster than the baseline.\n");
  return 0;
}
