#pragma once
// Decode-step projections through the cuBLASLt algorithm measured fastest for their shape.
//
// At the decode step's few rows (M <= 256) a projection is a skinny GEMM bound by reading its
// weight, and cuBLAS's first choice reached 25-90 % of the copy bandwidth on Hopper (engine_bench's
// GEMM tables). cuBLASLt offers several algorithms (tilings, split-K) for each problem; this unit
// times up to kTunedCandidates of them and torch's linear() on the first call of each shape (rows,
// out and in features, dtype, bias) outside a CUDA graph capture, each over rotating copies of the
// weight that together exceed the L2 cache (so that every call reads its weight from memory, as
// the decode step does), and keeps the fastest that computes the product (checked against
// linear()). Later calls of that shape, captured ones included, run the kept choice.
// vLLM and TensorRT-LLM pick their GEMM configurations by measurement the same way.
//
// CUDA builds only (tuned_gemm_cuda.cpp); the generation engine's fused path calls it through
// decode_linear() (fused_decoder.h) for the one-token rows of a decode step.
#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace turnrl::detail {

// Whether decode steps take tuned_linear(). Process-wide; on by default.
bool tuned_gemm_enabled();
void set_tuned_gemm(bool on);

// x W^T + b (b may be undefined) by the kept choice for x's shape; undefined where linear() was
// kept or the call is not one it takes (not CUDA, not bf16/f16, more than 256 rows, unaligned, a
// shape met first inside a graph capture or after 256 others were tuned): the caller runs linear()
// then.
torch::Tensor tuned_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// What the tuning measured for each shape, for benchmarks: microseconds a call of linear() and of
// the kept algorithm (equal to linear's when linear() won), and how many candidates were timed.
struct TunedGemmChoice {
  int64_t rows = 0, out_features = 0, in_features = 0;
  bool bias = false;
  int candidates = 0;
  double linear_us = 0, chosen_us = 0;
  bool uses_linear = true;
};
std::vector<TunedGemmChoice> tuned_gemm_choices();

}  // namespace turnrl::detail
