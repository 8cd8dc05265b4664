// GenerationEngine throughput (generation_engine.h) on random HF models of real shapes, against
// the memory roofline and against the sampler it replaced (baseline, same run): sample() over a
// KVCache that grows one column per step for the whole batch.
//
//   engine_bench [--device cpu|cuda] [--quick] [--profile] [--cases qwen3-0.6b:64,attention]
// cuda: bf16, Qwen3-0.6B and Qwen3-1.7B shapes, B = 64 and 256, prompt 256, 256 new tokens
//       (--quick: 0.6B, B = 64, 64 new tokens); cpu: fp32, qwen3-tiny's shape, small batches.
// Before the table: the sampler's inverse CDF against a whole-row scan and, on a GPU, a whole
// unfiltered draw through draw_tokens against the fused engine's one kernel a row, and one layer's
// decode attention by FlashAttention's variable-length kernel against the split-KV kernel
// (B = 64 and 256, 384 and 2048 keys a row). At B = 64 the GPU table also times the fused engine
// with FlashAttention's decode attention (GenerationEngineOptions::decode_attention).
// --cases: only the SHAPE:BATCH cases of the table and the kernels' tables (sampler, attention,
//       gemm, cublaslt) and the RL-group table (groups) it names, e.g. --cases qwen3-0.6b:64,attention.
// Last, RL groups: n samples of each prompt with share_prefixes against separate prefills
// (GPU: Qwen3-0.6B, 8 prompts x 8 samples, P = 1024, N = 128).
// --profile: after each case's timings, one more run of the shipped engine under the profiler (and
//       in the first case of each other engine), and the kernels that took the most time
//       (device_profile.h; with dependent launches a kernel's time includes its blocks' wait).
// On a GPU each case also times the fused engine with its kernels launched plainly instead of as
// programmatic dependent launches (decoder_kernels::set_dependent_launch), with the step's q/k/v
// normed, rotated and stored inside the attention kernel instead of by a launch of their own
// (decoder_kernels::set_decode_attention_from_qkv, off by default), one decode step at a
// time (GenerationEngineOptions::overlap_steps false), with an fp8 e4m3 KV cache
// (GenerationEngineOptions::kv_cache_dtype; against its own roofline), and at B <= 64 with
// the experimental decode_linear projections (decode_gemm.cuh, off by default), in the same run;
// before the table, each decode projection by cuBLAS against decode_linear and its tilings.
// Roofline: every decode step reads the weights once (the embedding table only where the head
// is tied to it) and each sequence's cached keys and values (mean context P + N/2), at the
// device-to-device copy bandwidth measured in the same run. Sampling at temperature 1, no stop
// tokens, so every sequence generates N tokens. Lines starting with RESULT are read by
// benchmarks/device/engine_bench.py, which adds transformers' generate on the same shapes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/version.h>

#include "bench_util.h"
#ifdef TURNRL_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>

#include "model/decode_attention.cuh"
#include "model/decode_gemm.cuh"
#include "model/decoder_kernels.cuh"
#include "model/device_timing.h"
#include "model/fp8_e4m3.h"
#include "model/fused_decoder.h"
#include "model/tuned_gemm.h"
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

#ifdef TURNRL_WITH_CUDA
// Seconds per call of fn() on the current stream: the mean of 50 calls back to back between two
// CUDA events, after 5 warm-up calls.
double event_seconds(const std::function<void()>& fn) {
  constexpr int kReps = 50;
  for (int i = 0; i < 5; ++i) fn();
  const double ms = turnrl::detail::device_milliseconds(c10::cuda::getCurrentCUDAStream().stream(), [&] {
    for (int i = 0; i < kReps; ++i) fn();
  });
  return ms / 1e3 / kReps;
}

// Seconds per replay of one CUDA graph of fn() (captured on a side stream after two warm-up calls):
// the mean of 20 replays between two CUDA events, after 3 warm-up replays.
double graph_seconds(const std::function<void()>& fn) {
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  c10::cuda::getCurrentCUDAStream().synchronize();
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    for (int i = 0; i < 2; ++i) fn();
    graph.capture_begin();
    fn();
    graph.capture_end();
  }
  side.synchronize();
  return event_seconds([&] { graph.replay(); });
}

// The four projections of a decode layer (name, out features N, in features K), merged as the
// engine runs them, for each Qwen3 shape the GEMM tables time.
using Projections = std::vector<std::tuple<const char*, int64_t, int64_t>>;
std::vector<std::pair<const char*, Projections>> decode_projections() {
  std::vector<std::pair<const char*, Projections>> out;
  for (const auto& [shape, hidden, intermediate] :
       std::vector<std::tuple<const char*, int64_t, int64_t>>{{"qwen3-0.6b", 1024, 3072}, {"qwen3-1.7b", 2048, 6144}}) {
    const int64_t q = 16 * 128, kv = 8 * 128;
    out.push_back({shape,
                   {{"qkv", q + 2 * kv, hidden}, {"o", hidden, q}, {"gate_up", 2 * intermediate, hidden},
                    {"down", hidden, intermediate}}});
  }
  return out;
}

// The decode step's projections at B = 16 and 64 rows (decode_linear takes at most 64), each over 28 distinct weight copies in one
// CUDA graph (a decode step reads 28 layers, so the weights come from HBM, not L2): cuBLAS through
// linear() (baseline) against decode_linear (decode_gemm.cuh), with and without dependent
// launches (in a chain of GEMMs each call's first weight loads overlap the call ahead; in the
// engine, the norm or attention kernel ahead). GB/s: the weight bytes over the time a call.
void print_decode_gemm_timing(double copy_bandwidth, const torch::Device& device) {
  namespace d = turnrl::detail;
  namespace dk = turnrl::decoder_kernels;
  const auto options = torch::TensorOptions(torch::kBFloat16).device(device);
  int sm_count = 0;
  cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device.index() < 0 ? 0 : device.index());
  const bool was = dk::decode_gemm_enabled();
  dk::set_decode_gemm(true);  // off by default (decode_gemm.cuh); on for this table
  if (!dk::decode_linear_supported(dk::DType::bf16, 64, 1024, 1024)) {
    dk::set_decode_gemm(was);
    std::printf("\ndecode_linear: not on this GPU (needs compute capability 9.0); the engine uses cuBLAS\n");
    return;
  }
  std::printf("\ndecode projections (bf16, 28 distinct weights a graph), us a call; copy bandwidth %.0f GB/s\n",
              copy_bandwidth / 1e9);
  std::printf("%-11s %4s %-8s %6s %6s | %9s %6s | %9s %6s %9s | %6s | %10s | %7s %s\n", "shape", "B", "proj", "N", "K",
              "cuBLAS us", "GB/s", "kernel us", "GB/s", "no PDL us", "ratio", "cols/split", "best us",
              "cols/split/stages");
  constexpr int kLayers = 28;
  for (const auto& [shape, projections] : decode_projections()) {
    for (const int64_t rows : {int64_t(16), int64_t(64)}) {
      double layer_cublas = 0, layer_kernel = 0, layer_best = 0;
      for (const auto& [name, n, k] : projections) {
        std::vector<torch::Tensor> weights;
        for (int i = 0; i < kLayers; ++i) weights.push_back(torch::randn({n, k}, options) * 0.02);
        const torch::Tensor x = torch::randn({rows, k}, options);
        const auto chain = [&](bool kernel) {
          return [&, kernel] {
            for (const torch::Tensor& w : weights) (void)(kernel ? d::decode_linear(x, w, {}) : at::linear(x, w));
          };
        };
        const double cublas_s = graph_seconds(chain(false)) / kLayers;
        const double kernel_s = graph_seconds(chain(true)) / kLayers;
        dk::set_dependent_launch(false);
        const double plain_s = graph_seconds(chain(true)) / kLayers;
        dk::set_dependent_launch(true);
        const dk::DecodeGemmTiling tiling = dk::decode_gemm_tiling(n, k, sm_count);
        // Every tiling the kernel has: the fastest, against the one decode_gemm_tiling() picks.
        std::vector<torch::Tensor> outs;
        for (int i = 0; i < kLayers; ++i) outs.push_back(torch::empty({rows, n}, options));
        double best_s = 0;
        dk::DecodeGemmTiling best;
        for (const int cols : {64, 128})
          for (const int splits : {1, 2, 4, 8})
            for (const int stages : {4, 6, 8}) {
              if (n % cols != 0 || (k / 64) % splits != 0) continue;
              const dk::DecodeGemmTiling t{cols, splits, stages};
              bool launched = true;
              const double seconds = graph_seconds([&] {
                for (int i = 0; i < kLayers; ++i)
                  launched = launched && dk::decode_linear(dk::DType::bf16, x.data_ptr(), weights[i].data_ptr(), nullptr,
                                                           outs[i].data_ptr(), rows, n, k, t,
                                                           c10::cuda::getCurrentCUDAStream().stream()) == cudaSuccess;
              }) / kLayers;
              if (launched && (best.cols == 0 || seconds < best_s)) best_s = seconds, best = t;
            }
        const double bytes = double(n * k) * 2;
        layer_cublas += cublas_s;
        layer_kernel += kernel_s;
        layer_best += best_s;
        std::printf("%-11s %4ld %-8s %6ld %6ld | %9.2f %6.0f | %9.2f %6.0f %9.2f | %6.2f | %6d/%d | %7.2f %3d/%d/%d\n",
                    shape, long(rows), name, long(n), long(k), cublas_s * 1e6, bytes / cublas_s / 1e9, kernel_s * 1e6,
                    bytes / kernel_s / 1e9, plain_s * 1e6, cublas_s / kernel_s, tiling.cols, tiling.splits,
                    best_s * 1e6, best.cols, best.splits, best.stages);
      }
      std::printf("%-11s %4ld %-8s %6s %6s | %9.2f %6s | %9.2f %6s %9s | %6.2f | %10s | %7.2f\n", shape, long(rows),
                  "layer", "", "", layer_cublas * 1e6, "", layer_kernel * 1e6, "", "", layer_cublas / layer_kernel, "",
                  layer_best * 1e6);
    }
  }
  dk::set_decode_gemm(was);
  std::printf("ratio > 1: decode_linear (the tiling decode_gemm_tiling() picks) is faster than cuBLAS; best: the\n"
              "fastest of its tilings in this run.\n\n");
}

// The same projections through cuBLASLt's own candidates: up to 32 algorithms its heuristic
// offers for the problem (bf16 in and out, float32 accumulation, no bias, 32 MiB workspace), each
// timed like the table above (28 distinct weights in a graph), against linear() (baseline, which
// takes cuBLAS's first choice). Whether picking among cuBLAS's algorithms by measurement would
// shorten the decode step's GEMMs.
void print_cublaslt_algorithms(const torch::Device& device) {
  const auto options = torch::TensorOptions(torch::kBFloat16).device(device);
  cublasLtHandle_t handle = nullptr;
  if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::printf("cuBLASLt: no handle\n");
    return;
  }
  const size_t workspace_bytes = size_t(32) << 20;
  const torch::Tensor workspace = torch::empty({int64_t(workspace_bytes)}, options.dtype(torch::kByte));
  std::printf("decode projections through cuBLASLt's algorithms (bf16, 28 distinct weights a graph), us a call\n");
  std::printf("%-11s %4s %-8s %6s %6s | %9s | %5s %9s %9s | %6s\n", "shape", "B", "proj", "N", "K", "linear us",
              "algos", "first us", "best us", "ratio");
  constexpr int kLayers = 28;
  for (const auto& [shape, projections] : decode_projections()) {
    for (const int64_t rows : {int64_t(16), int64_t(64), int64_t(256)}) {
      double layer_linear = 0, layer_best = 0;
      for (const auto& [name, n, k] : projections) {
        std::vector<torch::Tensor> weights, outs;
        for (int i = 0; i < kLayers; ++i) weights.push_back(torch::randn({n, k}, options) * 0.02);
        for (int i = 0; i < kLayers; ++i) outs.push_back(torch::empty({rows, n}, options));
        const torch::Tensor x = torch::randn({rows, k}, options);
        const double linear_s = graph_seconds([&] {
          for (const torch::Tensor& w : weights) (void)at::linear(x, w);
        }) / kLayers;
        // y [rows, n] row-major = x [rows, k] W^T: column-major C [n, rows] = op(A) B with A = W
        // stored as a column-major [k, n] (transposed) and B = x as a column-major [k, rows].
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
        cublasLtMatmulPreference_t preference = nullptr;
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep);
        cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k);
        cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, uint64_t(k), uint64_t(rows), k);
        cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, uint64_t(n), uint64_t(rows), n);
        cublasLtMatmulPreferenceCreate(&preference);
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                             sizeof workspace_bytes);
        cublasLtMatmulHeuristicResult_t found[32];
        int count = 0;
        cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, c, c, preference, 32, found, &count);
        const float alpha = 1.0f, beta = 0.0f;
        double first_s = 0, best_s = 0;
        for (int i = 0; i < count; ++i) {
          bool ok = true;
          const double seconds = graph_seconds([&] {
            for (int l = 0; l < kLayers; ++l)
              ok = ok && cublasLtMatmul(handle, op, &alpha, weights[size_t(l)].data_ptr(), a, x.data_ptr(), b, &beta,
                                        outs[size_t(l)].data_ptr(), c, outs[size_t(l)].data_ptr(), c, &found[i].algo,
                                        workspace.data_ptr(), workspace_bytes,
                                        c10::cuda::getCurrentCUDAStream().stream()) == CUBLAS_STATUS_SUCCESS;
          }) / kLayers;
          if (!ok) continue;
          // Every algorithm must compute the product: a wrong one is not a candidate.
          if (!torch::allclose(outs.back(), at::linear(x, weights.back()), 2e-2, 2e-2)) continue;
          if (i == 0) first_s = seconds;
          if (best_s == 0 || seconds < best_s) best_s = seconds;
        }
        cublasLtMatmulPreferenceDestroy(preference);
        cublasLtMatrixLayoutDestroy(a);
        cublasLtMatrixLayoutDestroy(b);
        cublasLtMatrixLayoutDestroy(c);
        cublasLtMatmulDescDestroy(op);
        layer_linear += linear_s;
        layer_best += best_s;
        std::printf("%-11s %4ld %-8s %6ld %6ld | %9.2f | %5d %9.2f %9.2f | %6.2f\n", shape, long(rows), name, long(n),
                    long(k), linear_s * 1e6, count, first_s * 1e6, best_s * 1e6, best_s > 0 ? linear_s / best_s : 0.0);
      }
      std::printf("%-11s %4ld %-8s %6s %6s | %9.2f | %5s %9s %9.2f | %6.2f\n", shape, long(rows), "layer", "", "",
                  layer_linear * 1e6, "", "", layer_best * 1e6, layer_best > 0 ? layer_linear / layer_best : 0.0);
    }
  }
  cublasLtDestroy(handle);
  std::printf("ratio > 1: the fastest of cuBLASLt's algorithms beats linear(); first: its heuristic's first choice.\n\n");
}

// One layer's decode attention at Qwen3-0.6B's attention shape (16 query heads, 8 key/value heads,
// head_dim 128, bf16), every row reading `keys` keys of its own slot of the cache: FlashAttention's
// variable-length forward as the engine called it before the split-KV kernel (group-major heads;
// baseline) against that kernel (decode_attention.cuh). GB/s: the K and V bytes read once, over the
// time; the copy bandwidth (read + write) is the bound.
void print_decode_attention_timing(double copy_bandwidth, const torch::Device& device) {
  namespace d = turnrl::detail;
  const int64_t heads = 16, kv_heads = 8, dim = 128, groups = heads / kv_heads;
  const auto options = torch::TensorOptions(torch::kBFloat16).device(device);
  const auto int32 = torch::TensorOptions(torch::kInt).device(device);
  int sm_count = 0;
  cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device.index() < 0 ? 0 : device.index());
  std::printf("\ndecode attention, one layer of Qwen3-0.6B's shape (16 heads, 8 kv heads, head_dim 128, bf16), "
              "%d SMs; copy bandwidth %.0f GB/s\n",
              sm_count, copy_bandwidth / 1e9);
  std::printf("%5s %5s | %10s %10s %6s | %6s | %10s %10s\n", "B", "keys", "flash us", "split us", "splits", "ratio",
              "flash GB/s", "split GB/s");
  for (const int64_t batch : {int64_t(64), int64_t(256)}) {
    for (const int64_t keys : {int64_t(384), int64_t(2048)}) {
      // The engine's slot cache [B + 1, capacity = keys, Hkv, D], flattened; row b in slot b.
      const torch::Tensor key_cache = torch::randn({(batch + 1) * keys, kv_heads, dim}, options);
      const torch::Tensor value_cache = torch::randn({(batch + 1) * keys, kv_heads, dim}, options);
      const torch::Tensor q = torch::randn({batch, heads, dim}, options);  // group-major for both kernels
      const torch::Tensor key_offsets = torch::arange(batch + 1, int32) * keys;
      const torch::Tensor keys_used = torch::full({batch}, keys, int32);
      const torch::Tensor grouped_query_offsets = torch::arange(batch + 1, int32) * groups;
      const double bytes = 2.0 * double(batch * keys * kv_heads * dim) * double(torch::elementSize(torch::kBFloat16));
      // splits 0: the count decode_attention_splits() picks for this GPU, as the engine calls it.
      const auto split_kv_seconds = [&](int64_t splits) {
        return event_seconds(
            [&] { (void)d::decode_attention(q, key_cache, value_cache, key_offsets, keys_used, true, keys, splits); });
      };
      const double split_s = split_kv_seconds(0);
      const int splits = turnrl::decoder_kernels::decode_attention_splits(batch, kv_heads, keys, sm_count);
      const bool flash = d::varlen_decode_attention_available();
      const double flash_s = flash ? event_seconds([&] {
        (void)d::flash_decode_attention(q, key_cache, value_cache, grouped_query_offsets, key_offsets, keys_used, keys);
      })
                                   : 0;
      const auto or_dash = [&](const char* format, double value) { return flash ? fmt::format(format, value) : "-"; };
      std::printf("%5ld %5ld | %10s %10.1f %6d | %6s | %10s %10.0f\n", long(batch), long(keys),
                  or_dash("{:.1f}", flash_s * 1e6).c_str(), split_s * 1e6, splits,
                  or_dash("{:.2f}", flash_s / split_s).c_str(), or_dash("{:.0f}", bytes / flash_s / 1e9).c_str(),
                  bytes / split_s / 1e9);
      // The choice of the split count, against the others.
      std::string sweep;
      for (const int64_t n : {1, 2, 3, 4, 6, 8, 16}) sweep += fmt::format(" {}: {:.1f}", n, split_kv_seconds(n) * 1e6);
      std::printf("%13s split-KV us by splits:%s\n", "", sweep.c_str());
      // The same keys and values as fp8 e4m3 codes (kv_cache_dtype fp8_e4m3): half the bytes.
      const torch::Tensor key_codes = d::to_e4m3(key_cache), value_codes = d::to_e4m3(value_cache);
      const auto fp8_seconds = [&](int64_t splits) {
        return event_seconds(
            [&] { (void)d::decode_attention(q, key_codes, value_codes, key_offsets, keys_used, true, keys, splits); });
      };
      const double fp8_s = fp8_seconds(0);
      std::printf("%13s fp8 e4m3 codes: %.1f us (%.2fx the bf16 cache), %.0f GB/s\n", "", fp8_s * 1e6, split_s / fp8_s,
                  bytes / 2 / fp8_s / 1e9);
      // Both again with the products on the tensor cores (decode_attention_tensor_cores), at the
      // same split count.
      const bool tensor_cores = turnrl::decoder_kernels::decode_attention_tensor_cores_enabled();
      turnrl::decoder_kernels::set_decode_attention_tensor_cores(true);
      const double tc_s = split_kv_seconds(0), tc_fp8_s = fp8_seconds(0);
      std::string tc_sweep;
      for (const int64_t n : {1, 2, 3, 4, 8})
        tc_sweep += fmt::format(" {}: {:.1f} / {:.1f}", n, split_kv_seconds(n) * 1e6, fp8_seconds(n) * 1e6);
      turnrl::decoder_kernels::set_decode_attention_tensor_cores(tensor_cores);
      std::printf("%13s tensor cores: bf16 %.1f us (%.2fx float32 FMAs), %.0f GB/s; fp8 codes %.1f us (%.2fx), %.0f "
                  "GB/s\n",
                  "", tc_s * 1e6, split_s / tc_s, bytes / tc_s / 1e9, tc_fp8_s * 1e6, fp8_s / tc_fp8_s,
                  bytes / 2 / tc_fp8_s / 1e9);
      std::printf("%13s tensor cores, us by splits (bf16 / fp8):%s\n", "", tc_sweep.c_str());
    }
  }
  std::printf("ratio > 1: the split-KV kernel is faster. Each time: the mean of 50 calls back to back (CUDA events).\n\n");
}
#endif

// An RL group's rollouts: `groups` prompts of `prompt` tokens, `samples` sampled continuations of
// each, with share_prefixes (each prompt prefilled once, the other samples copying its keys and
// values) against separate prefills (baseline, same run). Tokens/s counts the generated tokens.
void print_prefix_sharing(const std::string& shape, int64_t groups, int64_t samples, int64_t prompt,
                          int64_t new_tokens, torch::Dtype dtype, const torch::Device& device) {
  const HFConfig config = parse_hf_config(hf_preset_config(shape, kShapeVocab), shape);
  torch::manual_seed(0);
  HFDecoder model = bench::random_decoder(config, dtype, device);
  const torch::Tensor prompts = torch::randint(0, config.vocab_size, {groups, prompt}, torch::kLong);
  const SamplingOptions sampling = SamplingOptions().max_new(new_tokens).temp(1.0);
  std::printf("\nRL groups on %s: %ld prompts x %ld samples, P = %ld, N = %ld\n", shape.c_str(), long(groups),
              long(samples), long(prompt), long(new_tokens));
  std::printf("%-28s | %12s | %16s\n", "engine", "tok/s", "prefilled tokens");
  double baseline = 0;
  for (const bool share : {false, true}) {
    GenerationEngine engine(model,
                            GenerationEngineOptions().slots(groups * samples).capacity(prompt + new_tokens).share_prefixes(share));
    const auto run = [&] {
      for (int64_t g = 0; g < groups; ++g) {
        const torch::Tensor row = prompts[g].contiguous();
        const std::vector<int64_t> tokens(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + prompt);
        for (int64_t k = 0; k < samples; ++k)
          engine.add(GenerationRequest().prompt(tokens).options(sampling).stream(g * samples + k));
      }
      engine.run();
    };
    seconds_of(run, device);  // warm-up: captures the decode graphs
    const int64_t before = engine.stats().prefilled_tokens;
    const double rate = double(groups * samples * new_tokens) / seconds_of(run, device);
    if (!share) baseline = rate;
    std::printf("%-28s | %12.0f | %16ld%s\n", share ? "share_prefixes (turnrl)" : "separate prefills (baseline)", rate,
                long(engine.stats().prefilled_tokens - before),
                share ? fmt::format("   ratio {:.2f}", rate / baseline).c_str() : "");
  }
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
  const std::vector<Case> all_cases = cases;  // the kernels' tables take the first one's shape
  if (!args.cases.empty()) {
    const std::string wanted = "," + args.cases + ",";
    cases.erase(std::remove_if(cases.begin(), cases.end(),
                               [&](const Case& c) {
                                 return wanted.find(fmt::format(",{}:{},", c.shape, c.batch)) == std::string::npos;
                               }),
                cases.end());
  }

  const double bandwidth = bench::copy_bandwidth(args.device);
  std::printf("engine_bench on %s (%d threads), %s, LibTorch %s; copy bandwidth %.0f GB/s\n", args.device.str().c_str(),
              at::get_num_threads(), c10::toString(dtype), TORCH_VERSION, bandwidth / 1e9);
  const Case first = all_cases.front();
  const HFConfig first_config = parse_hf_config(hf_preset_config(first.shape, kShapeVocab), first.shape);
  // --cases: the kernels' tables it names (sampler, attention, gemm, cublaslt, groups), none by default.
  const auto table = [&](const char* name) {
    return args.cases.empty() || ("," + args.cases + ",").find(fmt::format(",{},", name)) != std::string::npos;
  };
  if (table("sampler")) {
    print_sdpa_backends(first_config, dtype, args.device, first.batch, first.prompt, first.prompt + first.new_tokens);
    print_inverse_cdf_timing(first.batch, first_config.vocab_size, args.device);
  }
#ifdef TURNRL_WITH_CUDA
  if (gpu && table("attention")) print_decode_attention_timing(bandwidth, args.device);
  if (gpu && table("gemm")) print_decode_gemm_timing(bandwidth, args.device);
  if (gpu && table("cublaslt")) print_cublaslt_algorithms(args.device);
#endif
  std::printf("%-11s %5s %5s %5s | %12s %12s %12s | %12s %6s | %12s %6s\n", "shape", "B", "P", "N", "fused tok/s",
              "flash tok/s", "plain tok/s", "roofline", "share", "old sampler", "ratio");
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

    // The engine with its fused GPU path (model.engine.fused_kernels), at B = 64 also with
    // FlashAttention's decode attention in place of the split-KV kernel, then with plain LibTorch ops.
    // --profile: the engine as shipped in every case, the others in the first case only.
    const auto time_engine = [&](bool fused, DecodeAttention attention, bool profile, bool overlap = true,
                                 KVCacheDtype storage = KVCacheDtype::model) {
      GenerationEngine engine(model, GenerationEngineOptions()
                                         .slots(c.batch)
                                         .capacity(c.prompt + c.new_tokens)
                                         .fused_kernels(fused)
                                         .decode_attention(attention)
                                         .overlap_steps(overlap)
                                         .kv_cache_dtype(storage));
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
      if (args.profile && (profile || &c == &cases.front()))
        bench::print_device_profile(
            fmt::format("{} B={}, {} engine", c.shape, c.batch,
                        !fused ? "plain" : attention == DecodeAttention::flash ? "fused (FlashAttention)" : "fused")
                .c_str(),
            run, args.device, 30);
      return seconds;
    };
    const double engine_seconds = time_engine(true, DecodeAttention::split_kv, true);
    // The fused engine with one of the decoder kernels' process-wide switches (decoder_kernels.cuh,
    // decode_attention.cuh) flipped for the run (0 without a GPU).
    const auto time_with_switch_flipped = [&](bool (*get)(), void (*set)(bool),
                                              KVCacheDtype storage = KVCacheDtype::model) {
      if (!gpu) return 0.0;
      const bool was = get();
      set(!was);
      const double seconds = time_engine(true, DecodeAttention::split_kv, false, true, storage);
      set(was);
      return seconds;
    };
    double plain_launch_seconds = 0, other_qkv_seconds = 0, tuned_flipped_seconds = 0, tensor_cores_flipped_seconds = 0;
#ifdef TURNRL_WITH_CUDA
    // The decoder's kernels launched plainly, not as programmatic dependent launches
    // (dependent_launch.cuh): what those save, measured in the same run.
    plain_launch_seconds =
        time_with_switch_flipped(decoder_kernels::dependent_launch_enabled, decoder_kernels::set_dependent_launch);
    // The decode step's queries, keys and values made inside the split-KV kernel
    // (decode_attention_from_qkv) or by qkv_rotary_store in a launch of their own before it,
    // whichever the default is not.
    other_qkv_seconds = time_with_switch_flipped(decoder_kernels::decode_attention_from_qkv_enabled,
                                                 decoder_kernels::set_decode_attention_from_qkv);
    // The decode projections by the cuBLASLt algorithm measured fastest for their shape
    // (tuned_gemm.h) or by linear(), whichever the default is not.
    tuned_flipped_seconds = time_with_switch_flipped(turnrl::detail::tuned_gemm_enabled, turnrl::detail::set_tuned_gemm);
    // The split-KV kernel's two products on the tensor cores or in float32 FMAs, whichever the
    // default is not (decode_attention.cuh).
    tensor_cores_flipped_seconds = time_with_switch_flipped(decoder_kernels::decode_attention_tensor_cores_enabled,
                                                            decoder_kernels::set_decode_attention_tensor_cores);
#endif
    // And with the keys and values held as fp8 e4m3 codes (kv_cache_dtype): half the cache's bytes.
    const double fp8_seconds =
        gpu ? time_engine(true, DecodeAttention::split_kv, false, true, KVCacheDtype::fp8_e4m3) : 0;
    // The fp8 cache with decode_attention_from_qkv flipped too: the one-launch kernel writes the
    // codes itself.
    double fp8_other_qkv_seconds = 0, fp8_tensor_cores_flipped_seconds = 0;
#ifdef TURNRL_WITH_CUDA
    fp8_other_qkv_seconds = time_with_switch_flipped(decoder_kernels::decode_attention_from_qkv_enabled,
                                                     decoder_kernels::set_decode_attention_from_qkv,
                                                     KVCacheDtype::fp8_e4m3);
    // And the fp8 cache with the tensor-core switch flipped: the kernel whose instructions a key
    // the halved bytes expose.
    fp8_tensor_cores_flipped_seconds = time_with_switch_flipped(decoder_kernels::decode_attention_tensor_cores_enabled,
                                                                decoder_kernels::set_decode_attention_tensor_cores,
                                                                KVCacheDtype::fp8_e4m3);
#endif
    // And recording each decode step's tokens before launching the next (overlap_steps false): what
    // overlapping the host's work with the device's saves.
    const double stepped_seconds = gpu ? time_engine(true, DecodeAttention::split_kv, false, false) : 0;
    // And with decode_linear (decode_gemm.cuh; off by default) in place of cuBLAS for the projections.
    double decode_gemm_seconds = 0;
#ifdef TURNRL_WITH_CUDA
    if (gpu && c.batch <= 64) {
      const bool was = decoder_kernels::decode_gemm_enabled();
      decoder_kernels::set_decode_gemm(true);
      if (decoder_kernels::decode_linear_supported(decoder_kernels::DType::bf16, c.batch, 64, 64))
        decode_gemm_seconds = time_engine(true, DecodeAttention::split_kv, false);
      decoder_kernels::set_decode_gemm(was);
    }
#endif
    const bool with_flash = gpu && c.batch == 64;
    const double flash_seconds = with_flash ? time_engine(true, DecodeAttention::flash, false) : 0;
    const double plain_seconds = gpu ? time_engine(false, DecodeAttention::split_kv, false) : engine_seconds;
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
    const double flash_rate = with_flash ? generated / flash_seconds : 0;
    std::printf("%-11s %5ld %5ld %5ld | %12.0f %12s %12.0f | %12.0f %5.1f%% | %12s %6s\n", c.shape.c_str(),
                long(c.batch), long(c.prompt), long(c.new_tokens), engine_rate,
                with_flash ? fmt::format("{:.0f}", flash_rate).c_str() : "-", plain_rate, roofline,
                100 * engine_rate / roofline, c.with_baseline ? fmt::format("{:.0f}", sampler_rate).c_str() : "-",
                c.with_baseline ? fmt::format("{:.2f}", engine_rate / sampler_rate).c_str() : "-");
    if (plain_launch_seconds > 0)
      std::printf("%-11s %5ld   fused with plain launches: %.0f tok/s (dependent launches: %.3fx)\n", c.shape.c_str(),
                  long(c.batch), generated / plain_launch_seconds, plain_launch_seconds / engine_seconds);
#ifdef TURNRL_WITH_CUDA
    if (other_qkv_seconds > 0) {
      const bool one_launch = decoder_kernels::decode_attention_from_qkv_enabled();
      // ratio > 1: the one launch (attention from q/k/v) is faster.
      std::printf("%-11s %5ld   fused, %s: %.0f tok/s (attention from q/k/v in one launch: %.3fx)\n",
                  c.shape.c_str(), long(c.batch),
                  one_launch ? "qkv_rotary_store before attention" : "attention from q/k/v in one launch",
                  generated / other_qkv_seconds,
                  one_launch ? other_qkv_seconds / engine_seconds : engine_seconds / other_qkv_seconds);
    }
#endif
#ifdef TURNRL_WITH_CUDA
    if (tensor_cores_flipped_seconds > 0) {
      const bool on = decoder_kernels::decode_attention_tensor_cores_enabled();
      std::printf("%-11s %5ld   fused, split-KV attention %s: %.0f tok/s (tensor cores against float32 FMAs: %.3fx)\n",
                  c.shape.c_str(), long(c.batch), on ? "in float32 FMAs" : "on the tensor cores",
                  generated / tensor_cores_flipped_seconds,
                  on ? tensor_cores_flipped_seconds / engine_seconds : engine_seconds / tensor_cores_flipped_seconds);
    }
#endif
#ifdef TURNRL_WITH_CUDA
    if (tuned_flipped_seconds > 0) {
      const bool tuned = turnrl::detail::tuned_gemm_enabled();
      std::printf("%-11s %5ld   fused, decode projections by %s: %.0f tok/s (%s: %.3fx)\n", c.shape.c_str(),
                  long(c.batch), tuned ? "linear()" : "tuned cuBLASLt algorithms", generated / tuned_flipped_seconds,
                  "tuned cuBLASLt algorithms against linear()",
                  tuned ? tuned_flipped_seconds / engine_seconds : engine_seconds / tuned_flipped_seconds);
    }
#endif
    if (fp8_seconds > 0) {
      // The roofline with one byte a cached key and value element.
      const double fp8_step_bytes = step_bytes - double(c.batch) * (double(c.prompt) + double(c.new_tokens) / 2) *
                                                     kv_per_token * (1 - 1 / element);
      const double fp8_roofline = double(c.batch) * bandwidth / fp8_step_bytes;
      std::printf("%-11s %5ld   fused, fp8 e4m3 cache: %.0f tok/s (against the %s cache: %.3fx; its roofline %.0f, "
                  "share %.1f%%)\n",
                  c.shape.c_str(), long(c.batch), generated / fp8_seconds, c10::toString(dtype),
                  engine_seconds / fp8_seconds, fp8_roofline, 100 * generated / fp8_seconds / fp8_roofline);
      if (fp8_other_qkv_seconds > 0)
        std::printf("%-11s %5ld   fused, fp8 e4m3 cache, decode_attention_from_qkv flipped: %.0f tok/s (%.3fx the "
                    "fp8 row)\n",
                    c.shape.c_str(), long(c.batch), generated / fp8_other_qkv_seconds,
                    fp8_seconds / fp8_other_qkv_seconds);
      if (fp8_tensor_cores_flipped_seconds > 0)
        std::printf("%-11s %5ld   fused, fp8 e4m3 cache, tensor-core attention flipped: %.0f tok/s (%.3fx the fp8 "
                    "row; against the %s cache: %.3fx; share %.1f%%)\n",
                    c.shape.c_str(), long(c.batch), generated / fp8_tensor_cores_flipped_seconds,
                    fp8_seconds / fp8_tensor_cores_flipped_seconds, c10::toString(dtype),
                    engine_seconds / fp8_tensor_cores_flipped_seconds,
                    100 * generated / fp8_tensor_cores_flipped_seconds / fp8_roofline);
    }
    if (stepped_seconds > 0)
      std::printf("%-11s %5ld   fused, one step at a time: %.0f tok/s (overlapped steps: %.3fx)\n", c.shape.c_str(),
                  long(c.batch), generated / stepped_seconds, stepped_seconds / engine_seconds);
    if (decode_gemm_seconds > 0)
      std::printf("%-11s %5ld   fused with decode_linear projections: %.0f tok/s (against cuBLAS: %.3fx)\n",
                  c.shape.c_str(), long(c.batch), generated / decode_gemm_seconds, engine_seconds / decode_gemm_seconds);
    std::printf("RESULT shape=%s batch=%ld prompt=%ld new=%ld engine_tok_s=%.1f flash_attention_tok_s=%.1f "
                "plain_tok_s=%.1f roofline_tok_s=%.1f copy_GBps=%.1f\n",
                c.shape.c_str(), long(c.batch), long(c.prompt), long(c.new_tokens), engine_rate, flash_rate,
                plain_rate, roofline, bandwidth / 1e9);
  }
#ifdef TURNRL_WITH_CUDA
  if (gpu && !cases.empty()) {
    // What tuning measured for each decode projection shape the engines met (tuned_gemm.h).
    std::printf("\ntuned decode projections: us a call, each over rotating weights beyond the L2 cache\n");
    std::printf("%5s %6s %6s %4s | %5s %9s %9s | %6s %s\n", "rows", "N", "K", "bias", "algos", "linear us", "kept us",
                "ratio", "kept");
    for (const turnrl::detail::TunedGemmChoice& t : turnrl::detail::tuned_gemm_choices())
      std::printf("%5ld %6ld %6ld %4s | %5d %9.2f %9.2f | %6.2f %s\n", long(t.rows), long(t.out_features),
                  long(t.in_features), t.bias ? "yes" : "no", t.candidates, t.linear_us, t.chosen_us,
                  t.linear_us / t.chosen_us, t.uses_linear ? "linear()" : "cuBLASLt");
  }
#endif
  if (table("groups")) {
    if (gpu) print_prefix_sharing("qwen3-0.6b", 8, 8, 1024, 128, dtype, args.device);
    else print_prefix_sharing("qwen3-tiny", 2, 4, 64, 8, dtype, args.device);
  }
  std::printf("\nfused: the engine with fused_kernels(true) (decode attention by the split-KV kernel); flash: the\n"
              "same with FlashAttention's decode attention (GPU, B = 64); plain: with fused_kernels(false) (on the\n"
              "CPU the fused and plain engines are one path); share: fused tokens/s over the roofline; ratio > 1:\n"
              "the fused engine beats the sampler it replaced.\n");
  return 0;
}
