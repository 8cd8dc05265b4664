// decode_linear, the decode step's skinny GEMM (src/model/decode_gemm.cuh, fused_decoder.h), against
// a float64 product of the same inputs: every tiling it has, 1 to 64 rows, float16 and bfloat16,
// with and without a bias; the rows past the problem left alone, the same bits every call, what
// it does not take going to linear(); and the bf16 engine with it against the engine with cuBLAS.
// The kernel is off by default (decode_gemm.cuh); each case turns it on for its own scope.
// Without a GPU of compute capability 9.0 each case says so and checks nothing.
#include <catch2/catch.hpp>

#include <c10/cuda/CUDAStream.h>

#include "model/decode_gemm.cuh"
#include "model/fused_decoder.h"
#include "model/generation_requests.h"
#include "model/hf_fixtures.h"
#include "model/kernel_switch.h"

using namespace turnrl;
using namespace turnrl::test;
namespace dk = turnrl::decoder_kernels;

namespace {

bool on_hopper() {
  if (!at::hasCUDA()) return false;
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 9;
}

dk::DType kernel_dtype(torch::Dtype dtype) { return dtype == torch::kHalf ? dk::DType::f16 : dk::DType::bf16; }

// decode_linear on (it is off by default: decode_gemm.cuh) for a scope, then as it was.
KernelSwitch decode_gemm_on() { return KernelSwitch(dk::decode_gemm_enabled, dk::set_decode_gemm, true); }

// One rounding to the dtype: half its unit in the last place, relative.
double unit_roundoff(torch::Dtype dtype) { return dtype == torch::kHalf ? 1.0 / 2048 : 1.0 / 256; }

}  // namespace

TEST_CASE("decode_gemm: every tiling equals a float64 product within one rounding", "[model][cuda]") {
  if (!on_hopper()) {
    WARN("needs a GPU of compute capability 9.0: skipped");
    return;
  }
  const KernelSwitch on_here = decode_gemm_on();
  torch::manual_seed(11);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{64, 64}, {128, 512}, {320, 3072}, {1024, 2048}, {4096, 1024}};
  int64_t launches = 0;
  for (const torch::Dtype dtype : {torch::kHalf, torch::kBFloat16})
    for (const auto& [outputs, inputs] : shapes)
      for (const int64_t rows : {1, 7, 16, 40, 64})
        for (const bool biased : {false, true}) {
          INFO(c10::toString(dtype) << " out " << outputs << " in " << inputs << " rows " << rows << " bias " << biased);
          const auto on = torch::TensorOptions(torch::kCUDA);
          const torch::Tensor x = torch::randn({rows, inputs}, on).to(dtype);
          const torch::Tensor w = (torch::randn({outputs, inputs}, on) / std::sqrt(double(inputs))).to(dtype);
          const torch::Tensor bias = biased ? torch::randn({outputs}, on).to(dtype) : torch::Tensor();
          torch::Tensor want = torch::matmul(x.to(torch::kDouble), w.to(torch::kDouble).t());
          if (biased) want = want + bias.to(torch::kDouble);
          const double scale = want.abs().max().item<double>();
          for (const int cols : {64, 128})
            for (const int splits : {1, 2, 4, 8})
              for (const int stages : {4, 6, 8}) {
              if (outputs % cols != 0 || (inputs / 64) % splits != 0) continue;
              INFO("cols " << cols << " splits " << splits << " stages " << stages);
              // Two rows past the problem, filled with a value the kernel must leave there.
              torch::Tensor out = torch::full({rows + 2, outputs}, 7.0, on.dtype(dtype));
              REQUIRE(dk::decode_linear(kernel_dtype(dtype), x.data_ptr(), w.data_ptr(),
                                        biased ? bias.data_ptr() : nullptr, out.data_ptr(), rows, outputs, inputs,
                                        {cols, splits, stages}, stream) == cudaSuccess);
              ++launches;
              const torch::Tensor got = out.narrow(0, 0, rows).to(torch::kDouble);
              const torch::Tensor excess = (got - want).abs() - want.abs() * unit_roundoff(dtype) * 1.001;
              CHECK(excess.max().item<double>() <= 1e-5 * scale);
              CHECK(torch::equal(out.narrow(0, rows, 2), torch::full({2, outputs}, 7.0, on.dtype(dtype))));
            }
        }
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  WARN(launches << " decode_linear calls checked against float64");
}

TEST_CASE("decode_gemm: the same bits every call, and linear() for what it does not take", "[model][cuda]") {
  if (!on_hopper()) {
    WARN("needs a GPU of compute capability 9.0: skipped");
    return;
  }
  const KernelSwitch on_here = decode_gemm_on();
  torch::NoGradGuard no_grad;
  torch::manual_seed(12);
  const auto on = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor w = torch::randn({1024, 3072}, on) * 0.02;
  const torch::Tensor x = torch::randn({64, 3072}, on);
  // Split over eight blocks on a 132-SM GPU: the sum order is the cluster's rank order, whichever
  // block ends first.
  const torch::Tensor first = turnrl::detail::decode_linear(x, w, {});
  for (int i = 0; i < 5; ++i) CHECK(torch::equal(turnrl::detail::decode_linear(x, w, {}), first));
  CHECK(max_abs_diff(first.to(torch::kFloat), at::linear(x, w).to(torch::kFloat)) < 0.05);

  CHECK(dk::decode_linear_supported(dk::DType::bf16, 64, 1024, 3072));
  CHECK_FALSE(dk::decode_linear_supported(dk::DType::bf16, 65, 1024, 3072));  // rows
  CHECK_FALSE(dk::decode_linear_supported(dk::DType::bf16, 8, 1000, 3072));   // outputs
  CHECK_FALSE(dk::decode_linear_supported(dk::DType::bf16, 8, 1024, 3000));   // inputs
  CHECK_FALSE(dk::decode_linear_supported(dk::DType::f32, 8, 1024, 3072));    // dtype
  // Those go to linear(): the same bits as calling it.
  const torch::Tensor many = torch::randn({65, 3072}, on);
  CHECK(torch::equal(turnrl::detail::decode_linear(many, w, {}), at::linear(many, w)));
  const torch::Tensor wf = w.to(torch::kFloat), xf = x.to(torch::kFloat);
  CHECK(torch::equal(turnrl::detail::decode_linear(xf, wf, {}), at::linear(xf, wf)));
  // A strided input is made contiguous first.
  const torch::Tensor wide = torch::randn({16, 2 * 3072}, on);
  const torch::Tensor strided = wide.narrow(1, 0, 3072);
  CHECK(torch::equal(turnrl::detail::decode_linear(strided, w, {}), turnrl::detail::decode_linear(strided.contiguous(), w, {})));
  // Off: linear() everywhere.
  dk::set_decode_gemm(false);
  CHECK_FALSE(dk::decode_linear_supported(dk::DType::bf16, 64, 1024, 3072));
  CHECK(torch::equal(turnrl::detail::decode_linear(x, w, {}), at::linear(x, w)));
}

TEST_CASE("decode_gemm: the bf16 engine with it samples what it samples with cuBLAS, graphs or not", "[model][cuda]") {
  if (!on_hopper()) {
    WARN("needs a GPU of compute capability 9.0: skipped");
    return;
  }
  for (const std::string& family : hf_families()) {
    INFO(family);
    auto policy = load_fixture(family, torch::kBFloat16);
    policy->to(torch::kCUDA);
    const HFConfig& config = policy->model()->config();
    // The fixtures' projections are multiples of 64 wide, so the engine's decode steps take the kernel.
    REQUIRE(config.hidden_size % 64 == 0);
    REQUIRE(config.intermediate_size % 64 == 0);
    const std::vector<GenerationRequest> requests = mixed_requests();
    const auto run = [&](bool graphs, bool fused) {
      GenerationEngine engine(policy->model(),
                              GenerationEngineOptions().slots(4).capacity(64).cuda_graphs(graphs).fused_kernels(fused));
      for (const GenerationRequest& r : requests) engine.add(r);
      return engine.run();
    };
    // Tokens two runs draw alike before they part, of those compared.
    const auto agreement = [&](const std::vector<GenerationResult>& x, const std::vector<GenerationResult>& y) {
      int64_t same = 0, compared = 0;
      for (size_t i = 0; i < requests.size(); ++i) {
        const size_t n = std::min(x[i].tokens.size(), y[i].tokens.size());
        size_t agree = 0;
        while (agree < n && x[i].tokens[agree] == y[i].tokens[agree]) ++agree;
        same += int64_t(agree);
        compared += int64_t(n);
      }
      return std::pair<int64_t, int64_t>(same, compared);
    };
    const auto cublas = run(true, true);
    const KernelSwitch on_here = decode_gemm_on();
    const auto graphed = run(true, true);
    const auto eager = run(false, true);
    const auto plain = run(true, false);
    for (size_t i = 0; i < requests.size(); ++i) {
      INFO("request " << i);
      check_same(graphed[i], eager[i]);  // the same kernels, replayed or not
      const GenerationResult &a = graphed[i], &b = cublas[i];
      const size_t n = std::min(a.tokens.size(), b.tokens.size());
      for (size_t t = 0; t < n && a.tokens[t] == b.tokens[t]; ++t) CHECK(std::abs(a.logp[t] - b.logp[t]) < 0.05);
    }
    const auto [same, compared] = agreement(graphed, cublas);
    const auto [kernel_plain, kernel_compared] = agreement(graphed, plain);
    const auto [cublas_plain, cublas_compared] = agreement(cublas, plain);
    WARN(family << ": engines with decode_linear and with cuBLAS agree on " << same << " of " << compared
                << " sampled tokens; against the plain engine, " << kernel_plain << " of " << kernel_compared
                << " and " << cublas_plain << " of " << cublas_compared);
    CHECK(double(same) >= 0.8 * double(compared));
  }
}
