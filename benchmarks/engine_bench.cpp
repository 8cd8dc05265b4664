// GenerationEngine throughput (generation_engine.h) on random HF models of real shapes, against
// the memory roofline and against the sampler it replaced (baseline, same run): sample() over a
// KVCache that grows one column per step for the whole batch.
//
//   engine_bench [--device cpu|cuda] [--quick] [--profile]
// cuda: bf16, Qwen3-0.6B and Qwen3-1.7B shapes, B = 64 and 256, prompt 256, 256 new tokens
//       (--quick: 0.6B, B = 64, 64 new tokens); cpu: fp32, qwen3-tiny's shape, small batches.
// Before the table: the sampler's inverse CDF against a whole-row scan and, on a GPU, a whole
// unfiltered draw through draw_tokens against the fused engine's one kernel a row.
// --profile: after the first case's timings, one more run of each engine under the profiler, and
//       the kernels that took the most time (device_profile.h).
// Roofline: every decode step reads the weights once (the embedding table only where the head
// is tied to it) and each sequence's cached keys and values (mean context P + N/2), at the
// device-to-device copy bandwidth measured in the same run. Sampling at temperature 1, no stop
// tokens, so every sequence generates N tokens. Lines starting with RESULT are read by
// benchmarks/device/engine_bench.py, which adds transformers' generate on the same shapes.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/version.h>

#include "bench_util.h"
#ifdef TURNRL_WITH_CUDA
#include "model/fused_decoder.h"
#endif
#include "device_profile.h"
#include "random_hf_decoder.h"
#include "turnrl/model/generation_engine.h"
#include "turnrl/model/hf_init.h"
#include "turnrl/model/sampler.h"

using namespace turnrl;

namespace {

// The tiny presets' vocabulary here (the real ones keep theirs); bos/eos ids unused by the timing.
const HfPresetVocab kShapeVocab{1024, 0, 0};

struct Case {
  std::string shape;
  int64_t batch, prompt, new_tokens;
  bool with_baseline;  // the old sampler is slow at large batches: timed where it stays short
};

// The previous HFPolicy::generate: one KVCache for the whole left-padded batch.
class BatchCacheNextToken : public NextTokenModel {
 public:
  BatchCacheNextToken(HFDecoder model, int64_t capacity) : model_(std::move(model)), capacity_(capacity) {}
  torch::Tensor prefill(const torch::Tensor& prompts, const torch::Tensor& mask) override {
    cache_ = model_->make_cache(prompts.size(0), capacity_);
    return model_->forward(prompts, mask, &cache_, true).select(1, -1);
  }
  torch::Tensor extend(const torch::Tensor& token, const torch::Tensor& valid) override {
    return model_->forward(token.unsqueeze(1), valid.unsqueeze(1), &cache_, true).select(1, -1);
  }

 private:
  HFDecoder model_;
  int64_t capacity_;
  KVCache cache_;
};

// The backend LibTorch's SDPA picks for the engine's attention calls (grouped heads folded into
// the query axis, an explicit mask, keys read in place from the [slots + 1, capacity, kv_heads,
// head_dim] cache): decode (one token per row) and prefill (P tokens per row).
void print_sdpa_backends(const HFConfig& config, torch::Dtype dtype, torch::Device device, int64_t batch, int64_t prompt,
                         int64_t capacity) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  const int64_t kv = config.num_key_value_heads, groups = config.num_attention_heads / kv, dim = config.head_dim;
  const auto options = torch::TensorOptions(dtype).device(device);
  const torch::Tensor cache = torch::zeros({batch + 1, capacity, kv, dim}, options);
  const torch::Tensor keys = cache.narrow(0, 0, batch).transpose(1, 2);
  const auto name = [](int64_t backend) -> std::string {
    static const char* const names[] = {"math", "flash_attention", "efficient_attention", "cudnn_attention"};
    return backend >= 0 && backend < 4 ? names[backend] : fmt::format("backend {}", backend);
  };
  for (const int64_t queries : {int64_t(1), prompt}) {
    const torch::Tensor q = torch::zeros({batch, kv, groups * queries, dim}, options);
    const torch::Tensor mask = torch::ones({batch, 1, groups * queries, capacity}, options.dtype(torch::kBool));
    const int64_t backend = at::_fused_sdp_choice(q, keys, keys, mask, 0.0, false, std::nullopt, false);
    std::printf("SDPA backend, %s (q %s, keys %s strided, bool mask): %s\n", queries == 1 ? "decode" : "prefill",
                c10::str(q.sizes()).c_str(), c10::str(keys.sizes()).c_str(), name(backend).c_str());
  }
#else
  (void)config, (void)dtype, (void)device, (void)batch, (void)prompt, (void)capacity;
  std::printf("SDPA backend: LibTorch %s has no scaled_dot_product_attention with these options (plain path)\n",
              TORCH_VERSION);
#endif
}

double seconds_of(const std::function<void()>& fn, const torch::Device& device) {
  bench::synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  bench::synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// The sampler's inverse CDF (sampler.h) on one decode step's probabilities against the whole-row
// scan it replaced (baseline, same run).
void print_inverse_cdf_timing(int64_t batch, int64_t vocab, const torch::Device& device) {
  const torch::Tensor probs = torch::randn({batch, vocab}, torch::TensorOptions(device)).softmax(-1);
  const torch::Tensor uniform = torch::rand({batch}, torch::TensorOptions(torch::kDouble).device(device));
  const auto scan = [&] {
    const torch::Tensor cdf = probs.cumsum(-1);
    const torch::Tensor target = (uniform.to(torch::kFloat) * cdf.select(1, -1)).unsqueeze(1);
    (void)(cdf < target).sum(-1).clamp_max(vocab - 1);
  };
  const double scan_s = bench::median_seconds(scan, device);
  const double two_level_s = bench::median_seconds([&] { (void)inverse_cdf(probs, uniform); }, device);
  std::printf("inverse CDF of [%ld, %ld] probabilities: whole-row scan %.1f us, two-level %.1f us (ratio %.2f)\n",
              long(batch), long(vocab), scan_s * 1e6, two_level_s * 1e6, scan_s / two_level_s);
#ifdef TURNRL_WITH_CUDA
  // A whole unfiltered draw from bf16 logits: draw_tokens (log-softmax, exp, the two-level inverse
  // CDF, argmax for greedy rows; baseline) against the fused engine's one kernel a row.
  if (!device.is_cuda()) return;
  const torch::Tensor logits = torch::randn({batch, vocab}, torch::TensorOptions(torch::kBFloat16).device(device));
  RowSampling rows = RowSampling::repeat(SamplingOptions().temp(1.0), batch, device);
  rows.filtered = false;
  const double draw_s = bench::median_seconds([&] { (void)draw_tokens(logits, rows, uniform); }, device);
  const double fused_s = bench::median_seconds(
      [&] { (void)turnrl::detail::fused_sample_unfiltered(logits, rows.temperature, uniform); }, device);
  std::printf("one draw from [%ld, %ld] bf16 logits: draw_tokens %.1f us, one kernel a row %.1f us (ratio %.2f)\n",
              long(batch), long(vocab), draw_s * 1e6, fused_s * 1e6, draw_s / fused_s);
#endif
}

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  const bool gpu = args.device.is_cuda();
  const torch::Dtype dtype = gpu ? torch::kBFloat16 : torch::kFloat;
  std::vector<Case> cases;
  if (gpu && args.quick) cases = {{"qwen3-0.6b", 64, 256, 64, true}};
  else if (gpu)
    cases = {{"qwen3-0.6b", 64, 256, 256, true}, {"qwen3-0.6b", 256, 256, 256, false},
             {"qwen3-1.7b", 64, 256, 256, true}, {"qwen3-1.7b", 256, 256, 256, false}};
  else cases = {{"qwen3-tiny", 4, 16, 16, true}, {"qwen3-tiny", 16, 16, 16, true}};

  const double bandwidth = bench::copy_bandwidth(args.device);
  std::printf("engine_bench on %s (%d threads), %s, LibTorch %s; copy bandwidth %.0f GB/s\n", args.device.str().c_str(),
              at::get_num_threads(), c10::toString(dtype), TORCH_VERSION, bandwidth / 1e9);
  const Case& first = cases.front();
  const HFConfig first_config = parse_hf_config(hf_preset_config(first.shape, kShapeVocab), first.shape);
  print_sdpa_backends(first_config, dtype, args.device, first.batch, first.prompt, first.prompt + first.new_tokens);
  print_inverse_cdf_timing(first.batch, first_config.vocab_size, args.device);
  std::printf("%-11s %5s %5s %5s | %12s %12s | %12s %6s | %12s %6s\n", "shape", "B", "P", "N", "fused tok/s",
              "plain tok/s", "roofline", "share", "old sampler", "ratio");
  torch::NoGradGuard no_grad;
  std::string model_shape;
  HFDecoder model{nullptr};
  for (const Case& c : cases) {
    const HFConfig config = parse_hf_config(hf_preset_config(c.shape, kShapeVocab), c.shape);
    if (c.shape != model_shape) {
      model = HFDecoder{nullptr};
      torch::manual_seed(0);
      model = bench::random_decoder(config, dtype, args.device);
      model_shape = c.shape;
    }
    const torch::Tensor prompts = torch::randint(0, config.vocab_size, {c.batch, c.prompt}, torch::kLong);
    const SamplingOptions sampling = SamplingOptions().max_new(c.new_tokens).temp(1.0);

    // The engine with its fused GPU path (model.engine.fused_kernels), then with plain LibTorch ops.
    const auto time_engine = [&](bool fused) {
      GenerationEngine engine(model,
                              GenerationEngineOptions().slots(c.batch).capacity(c.prompt + c.new_tokens).fused_kernels(fused));
      const auto run = [&] {
        for (int64_t b = 0; b < c.batch; ++b) {
          const torch::Tensor row = prompts[b].contiguous();
          engine.add(GenerationRequest()
                         .prompt(std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + c.prompt))
                         .options(sampling)
                         .stream(b));
        }
        engine.run();
      };
      seconds_of(run, args.device);  // warm-up: captures the decode graphs
      const double seconds = seconds_of(run, args.device);
      if (args.profile && &c == &cases.front())
        bench::print_device_profile(fmt::format("{} B={}, {} engine", c.shape, c.batch, fused ? "fused" : "plain").c_str(),
                                    run, args.device);
      return seconds;
    };
    const double engine_seconds = time_engine(true);
    const double plain_seconds = gpu ? time_engine(false) : engine_seconds;
    double sampler_seconds = 0;
    if (c.with_baseline) {
      BatchCacheNextToken next(model, c.prompt + c.new_tokens);
      const torch::Tensor device_prompts = prompts.to(args.device);
      sample(next, device_prompts, {}, sampling);
      sampler_seconds = seconds_of([&] { sample(next, device_prompts, {}, sampling); }, args.device);
    }

    int64_t weight_elements = 0;
    for (const auto& p : model->parameters()) weight_elements += p.numel();
    // An untied embedding table is only gathered from, not read whole.
    if (!config.tie_word_embeddings) weight_elements -= config.vocab_size * config.hidden_size;
    const double element = double(torch::elementSize(dtype));
    const double kv_per_token = 2.0 * double(config.num_hidden_layers * config.num_key_value_heads * config.head_dim) * element;
    const double step_bytes = double(weight_elements) * element +
                              double(c.batch) * (double(c.prompt) + double(c.new_tokens) / 2) * kv_per_token;
    const double roofline = double(c.batch) * bandwidth / step_bytes;
    const double generated = double(c.batch * c.new_tokens);
    const double engine_rate = generated / engine_seconds;
    const double sampler_rate = c.with_baseline ? generated / sampler_seconds : 0;
    const double plain_rate = generated / plain_seconds;
    std::printf("%-11s %5ld %5ld %5ld | %12.0f %12.0f | %12.0f %5.1f%% | %12s %6s\n", c.shape.c_str(), long(c.batch),
                long(c.prompt), long(c.new_tokens), engine_rate, plain_rate, roofline, 100 * engine_rate / roofline,
                c.with_baseline ? fmt::format("{:.0f}", sampler_rate).c_str() : "-",
                c.with_baseline ? fmt::format("{:.2f}", engine_rate / sampler_rate).c_str() : "-");
    std::printf("RESULT shape=%s batch=%ld prompt=%ld new=%ld engine_tok_s=%.1f plain_tok_s=%.1f roofline_tok_s=%.1f copy_GBps=%.1f\n",
                c.shape.c_str(), long(c.batch), long(c.prompt), long(c.new_tokens), engine_rate, plain_rate,
                roofline, bandwidth / 1e9);
  }
  std::printf("\nfused: the engine with fused_kernels(true); plain: with fused_kernels(false) (on the CPU the two are\n"
              "one path); share: fused tokens/s over the roofline; ratio > 1: the fused engine beats the sampler it\n"
              "replaced.\n");
  return 0;
}
