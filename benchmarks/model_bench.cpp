// TransformerPolicy throughput: training tokens/s (forward_logp + backward) and generation
// tokens/s (KV-cache sampling, plus the uncached recompute path on small sizes), with the achieved
// matmul TFLOP/s as a fraction of the peak measured in the same run (a large at::mm in the model's
// dtype). benchmarks/device/model_bench.py is the same model and loop in Python PyTorch: run both
// on the GPU machine to compare.
//
//   model_bench [--device cpu|cuda] [--quick] [--dtype fp32|bf16] [--size tiny|small|base]
// Defaults: cpu -> fp32, size small; cuda -> bf16, size base (~300M parameters). The uncached
// (recompute) generation row is timed for size tiny only (it is quadratic in the length).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <torch/version.h>

#include "bench_util.h"
#include "turnrl/model/transformer.h"

using namespace turnrl;

namespace {

struct Size {
  TransformerOptions model;
  int64_t train_batch, train_len;                 // training micro-batch
  int64_t gen_batch, gen_prompt, gen_new;         // generation
  bool recompute;                                 // also time uncached generation
};

Size size_named(const std::string& name, bool quick) {
  if (name == "tiny" || quick)
    return {TransformerOptions().vocab(263).d_model(128).layers(2).heads(4).max_seq(512), 4, 128, 8, 32, 32, true};
  if (name == "small")
    return {TransformerOptions().vocab(263).d_model(256).layers(4).heads(4).max_seq(1024), 4, 256, 8, 64, 64, false};
  if (name == "base")
    return {TransformerOptions().vocab(263).d_model(1024).layers(24).heads(16).max_seq(4096), 8, 1024, 64, 256, 256,
            false};
  std::fprintf(stderr, "--size: unknown '%s'; allowed: tiny, small, base\n", name.c_str());
  std::exit(2);
}

// Achieved FLOP/s of a square at::mm in `dtype`: the peak the model is compared against.
double matmul_peak(const torch::Device& device, torch::Dtype dtype, int64_t n) {
  const auto options = torch::TensorOptions(dtype).device(device);
  const torch::Tensor a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  torch::Tensor c = torch::empty({n, n}, options);
  const double t = bench::median_seconds([&] { at::mm_out(c, a, b); }, device, 0.5, 100, 2);
  return 2.0 * double(n) * double(n) * double(n) / t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype_name, size_name;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) dtype_name = argv[++i];
    else if (!std::strcmp(argv[i], "--size") && i + 1 < argc) size_name = argv[++i];
    else rest.push_back(argv[i]);
  }
  const bench::Args args = bench::parse_args(int(rest.size()), rest.data());
  const bool cuda = args.device.is_cuda();
  if (dtype_name.empty()) dtype_name = cuda ? "bf16" : "fp32";
  if (size_name.empty()) size_name = cuda ? "base" : "small";
  if (dtype_name != "fp32" && dtype_name != "bf16") {
    std::fprintf(stderr, "--dtype: unknown '%s'; allowed: fp32, bf16\n", dtype_name.c_str());
    return 2;
  }
  const torch::Dtype dtype = dtype_name == "bf16" ? torch::kBFloat16 : torch::kFloat;
  Size s = size_named(size_name, args.quick);
  s.model.dtype(dtype);
  const TransformerOptions& m = s.model;

  const int64_t peak_n = cuda ? 8192 : 1024;
  const double peak = matmul_peak(args.device, dtype, peak_n);
  std::printf("model_bench on %s (%d threads), %s, LibTorch %s\n", args.device.str().c_str(), at::get_num_threads(),
              dtype_name.c_str(), TORCH_VERSION);
  std::printf("baseline: matmul peak (at::mm %ld^2 %s, same run) = %.1f GFLOP/s\n", long(peak_n), dtype_name.c_str(),
              peak / 1e9);
  std::printf("model: d_model %ld, layers %ld, heads %ld, ffn %ld, vocab %ld: %.1fM parameters\n\n", long(m.d_model()),
              long(m.layers()), long(m.heads()), long(m.ffn_width()), long(m.vocab()), double(m.num_parameters()) / 1e6);
  std::printf("%-44s | %12s %10s %9s\n", "case", "tokens/s", "GFLOP/s", "x of peak");

  torch::manual_seed(0);
  TransformerPolicy policy(m, args.device);
  const auto report = [&](const std::string& name, double tokens, double flops, double seconds) {
    std::printf("%-44s | %12.0f %10.1f %9.3f\n", name.c_str(), tokens / seconds, flops / seconds / 1e9,
                flops / seconds / peak);
  };

  {  // Training: forward_logp + backward over every token of a micro-batch.
    const torch::Tensor tokens =
        torch::randint(0, m.vocab(), {s.train_batch, s.train_len}, torch::TensorOptions(torch::kLong).device(args.device));
    const double t = bench::median_seconds(
        [&] {
          for (auto& p : policy.parameters()) p.mutable_grad() = torch::Tensor();
          (-policy.forward_logp(tokens).logp.mean()).backward();
        },
        args.device, args.quick ? 0.2 : 1.0, 50, 2);
    const double n = double(s.train_batch * s.train_len);
    char name[64];
    std::snprintf(name, sizeof name, "train fwd+bwd  B=%ld T=%ld", long(s.train_batch), long(s.train_len));
    report(name, n, 3 * n * m.forward_flops_per_token(double(s.train_len + 1) / 2), t);
  }

  const torch::Tensor prompts = torch::randint(0, m.vocab(), {s.gen_batch, s.gen_prompt},
                                               torch::TensorOptions(torch::kLong).device(args.device));
  const auto generation = [&](bool cache) {
    const SamplingOptions o = SamplingOptions().max_new(s.gen_new).rng_seed(1).cache(cache);
    const double t = bench::median_seconds([&] { policy.generate(prompts, {}, o); }, args.device,
                                           args.quick ? 0.2 : 1.0, 20, 1);
    const double generated = double(s.gen_batch * s.gen_new);
    // Prefill of the prompts plus one decoded token per step at the average cache length.
    const double flops = double(s.gen_batch * s.gen_prompt) * m.forward_flops_per_token(double(s.gen_prompt + 1) / 2) +
                         generated * m.forward_flops_per_token(double(s.gen_prompt) + double(s.gen_new) / 2);
    char name[64];
    std::snprintf(name, sizeof name, "generate %s B=%ld P=%ld N=%ld", cache ? "kv-cache " : "recompute", long(s.gen_batch),
                  long(s.gen_prompt), long(s.gen_new));
    report(name, generated, flops, t);
    return t;
  };
  policy.eval();
  const double cached = generation(true);
  if (s.recompute) {
    const double recompute = generation(false);
    std::printf("\nKV cache speedup over recompute: %.2fx\n", recompute / cached);
  }
  std::printf("\nFLOPs: matmuls only (2 per multiply-add), causal attention at the average context; training = 3x "
              "forward. The recompute row counts useful FLOPs only.\n");
  return 0;
}
