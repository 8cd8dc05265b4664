#include "tuned_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "device_timing.h"

namespace turnrl::detail {
namespace {

constexpr int64_t kMaxRows = 256;
constexpr int kTunedCandidates = 16;  // cuBLASLt's heuristic offers; all are timed
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr int kTimedCalls = 48;  // calls a candidate is timed over (after one untimed pass)
// Shapes tuned in a process, at about 20 ms each; later new shapes go to linear(). The engine on
// graphs meets four a batch-size bucket; eagerly, four for each count of running rows.
constexpr size_t kMaxTunedShapes = 256;

std::atomic<bool> enabled{true};

struct Key {
  int device;
  c10::ScalarType dtype;
  int64_t rows, n, k;
  bool bias;
  bool operator<(const Key& o) const {
    return std::tie(device, dtype, rows, n, k, bias) < std::tie(o.device, o.dtype, o.rows, o.n, o.k, o.bias);
  }
};

// A shape's kept choice: linear(), or one cuBLASLt algorithm with the descriptors it was chosen for.
struct Plan {
  size_t alignment = 256;  // the pointer alignment the algorithm was chosen under
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  TunedGemmChoice choice;  // choice.uses_linear: linear() is the kept choice
};

// Never destroyed: plans and handles live as long as the process (captured graphs hold their
// algorithms and workspaces), and no teardown order can run them after CUDA has gone.
struct State {
  std::mutex mutex;
  std::map<Key, Plan> plans;
  std::map<int, cublasLtHandle_t> handles;
  std::map<cudaStream_t, torch::Tensor> workspaces;  // one a stream: calls on a stream never overlap
};
State& state() {
  static State* s = new State;
  return *s;
}

cudaDataType_t cuda_type(c10::ScalarType t) { return t == torch::kHalf ? CUDA_R_16F : CUDA_R_16BF; }

size_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  size_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone;
}

// y [rows, n] row-major = x [rows, k] W^T (+ b): column-major C [n, rows] = op(A) B (+ b per row
// of C), with A = W read as a column-major [k, n] and transposed, B = x as a column-major [k, rows].
bool run_plan(const Plan& plan, cublasLtHandle_t handle, const void* x, const void* w, const void* bias, void* y,
              void* workspace, cudaStream_t stream) {
  if (bias != nullptr &&
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) !=
          CUBLAS_STATUS_SUCCESS)
    return false;
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(handle, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y, plan.c, &plan.algo,
                        workspace, plan.workspace, stream) == CUBLAS_STATUS_SUCCESS;
}

void destroy_descriptors(Plan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  p.a = p.b = p.c = nullptr;
  p.op = nullptr;
}

// Times `call(i)` over kTimedCalls calls cycling through `copies` weights, after one untimed
// pass: microseconds a call. The device first spins for about a millisecond, so that the host has
// queued every timed call before the first runs: the time is the device's alone, back to back, as
// in a replayed graph, not the host's launch overhead (larger for linear() than for one cuBLASLt
// call).
template <typename F>
double time_calls(int copies, cudaStream_t stream, const F& call) {
  for (int i = 0; i < copies; ++i) call(i);
  at::cuda::sleep(int64_t(2) << 20);
  const double ms = device_milliseconds(stream, [&] {
    for (int i = 0; i < kTimedCalls; ++i) call(i % copies);
  });
  return 1000.0 * ms / kTimedCalls;
}

// Tunes a shape on `stream` (not capturing): choice.uses_linear when linear() measured fastest or
// no algorithm computed the product.
Plan tune(const Key& key, cublasLtHandle_t handle, const torch::Tensor& x, const torch::Tensor& weight,
          const torch::Tensor& bias, void* workspace, cudaStream_t stream) {
  Plan plan;
  plan.choice = TunedGemmChoice{key.rows, key.n, key.k, key.bias};
  plan.alignment = std::min({alignment_of(x.data_ptr()), alignment_of(weight.data_ptr()),
                             bias.defined() ? alignment_of(bias.data_ptr()) : size_t(256)});
  // Copies of the weight that together exceed the L2 cache twice: every timed call reads its
  // weight from memory, as a decode step's projections do.
  const double weight_bytes = double(weight.numel()) * double(weight.element_size());
  const double l2 = double(at::cuda::getCurrentDeviceProperties()->l2CacheSize);
  const int copies = int(std::clamp(std::ceil(2.0 * l2 / weight_bytes) + 1.0, 1.0, 32.0));
  std::vector<torch::Tensor> weights{weight};
  for (int i = 1; i < copies; ++i) weights.push_back(weight.clone());
  const torch::Tensor x2 = x.view({key.rows, key.k});
  const torch::Tensor want = at::linear(x2, weight, bias);
  plan.choice.linear_us = time_calls(copies, stream, [&](int i) { (void)at::linear(x2, weights[size_t(i)], bias); });
  plan.choice.chosen_us = plan.choice.linear_us;

  const cudaDataType_t type = cuda_type(key.dtype);
  cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose);
  cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep);
  if (key.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
  }
  cublasLtMatrixLayoutCreate(&plan.a, type, uint64_t(key.k), uint64_t(key.n), key.k);
  cublasLtMatrixLayoutCreate(&plan.b, type, uint64_t(key.k), uint64_t(key.rows), key.k);
  cublasLtMatrixLayoutCreate(&plan.c, type, uint64_t(key.n), uint64_t(key.rows), key.n);
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulPreferenceCreate(&preference);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                       sizeof kWorkspaceBytes);
  const uint32_t alignment = uint32_t(plan.alignment);
  for (const auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(preference, attribute, &alignment, sizeof alignment);
  cublasLtMatmulHeuristicResult_t found[kTunedCandidates];
  int count = 0;
  if (cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.c, plan.c, preference, kTunedCandidates,
                                     found, &count) != CUBLAS_STATUS_SUCCESS)
    count = 0;
  cublasLtMatmulPreferenceDestroy(preference);
  plan.choice.candidates = count;

  torch::Tensor out = torch::empty({key.rows, key.n}, x.options());
  const void* bias_data = bias.defined() ? bias.data_ptr() : nullptr;
  const double scale = want.abs().max().item<double>();
  int best = -1;
  for (int i = 0; i < count; ++i) {
    Plan candidate = plan;
    candidate.algo = found[i].algo;
    candidate.workspace = found[i].workspaceSize;
    if (candidate.workspace > kWorkspaceBytes) continue;
    bool ok = true;
    const double us = time_calls(copies, stream, [&](int c) {
      ok = ok && run_plan(candidate, handle, x2.data_ptr(), weights[size_t(c)].data_ptr(), bias_data, out.data_ptr(),
                          workspace, stream);
    });
    if (!ok || cudaGetLastError() != cudaSuccess) continue;
    // The last call read the weight itself (copy 0) only if kTimedCalls is a multiple of the
    // copies: compute the product once more from it to check.
    ok = run_plan(candidate, handle, x2.data_ptr(), weight.data_ptr(), bias_data, out.data_ptr(), workspace, stream);
    // An algorithm must compute the product: within a few roundings of the dtype of linear()'s.
    if (!ok || (out - want).abs().max().item<double>() > 2e-2 * scale + 1e-3) continue;
    if (us < plan.choice.chosen_us) {
      plan.choice.chosen_us = us;
      best = i;
    }
  }
  if (best < 0) {
    destroy_descriptors(plan);
    return plan;
  }
  plan.choice.uses_linear = false;
  plan.algo = found[best].algo;
  plan.workspace = found[best].workspaceSize;
  return plan;
}

}  // namespace

bool tuned_gemm_enabled() { return enabled.load(); }
void set_tuned_gemm(bool on) { enabled.store(on); }

torch::Tensor tuned_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const c10::ScalarType type = weight.scalar_type();
  if (!x.is_cuda() || (type != torch::kBFloat16 && type != torch::kHalf) || x.scalar_type() != type ||
      weight.dim() != 2 || !weight.is_contiguous() || !x.is_contiguous() || x.dim() < 1 ||
      x.size(-1) != weight.size(1) || (bias.defined() && (bias.scalar_type() != type || !bias.is_contiguous())))
    return {};
  const int64_t k = weight.size(1), n = weight.size(0), rows = x.numel() / std::max<int64_t>(k, 1);
  if (rows < 1 || rows > kMaxRows || k < 1) return {};
  const Key key{int(x.get_device()), type, rows, n, k, bias.defined()};
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(key.device).stream();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  cublasLtHandle_t& handle = s.handles[key.device];
  if (handle == nullptr && cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    handle = nullptr;
    return {};
  }
  auto workspace = s.workspaces.find(stream);
  auto plan = s.plans.find(key);
  if (plan == s.plans.end() || workspace == s.workspaces.end()) {
    // Nothing is tuned or allocated inside a capture: the graph's warm-up outside it does that.
    if (capturing(stream) || (plan == s.plans.end() && s.plans.size() >= kMaxTunedShapes)) return {};
    if (workspace == s.workspaces.end())
      workspace = s.workspaces
                      .emplace(stream, torch::empty({int64_t(kWorkspaceBytes)}, x.options().dtype(torch::kByte)))
                      .first;
    if (plan == s.plans.end())
      plan = s.plans.emplace(key, tune(key, handle, x, weight, bias, workspace->second.data_ptr(), stream)).first;
  }
  const Plan& p = plan->second;
  if (p.choice.uses_linear) return {};
  const void* bias_data = bias.defined() ? bias.data_ptr() : nullptr;
  if (alignment_of(x.data_ptr()) < p.alignment || alignment_of(weight.data_ptr()) < p.alignment ||
      (bias_data != nullptr && alignment_of(bias_data) < p.alignment))
    return {};
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = n;
  torch::Tensor out = torch::empty(sizes, x.options());
  if (alignment_of(out.data_ptr()) < p.alignment ||
      !run_plan(p, handle, x.data_ptr(), weight.data_ptr(), bias_data, out.data_ptr(), workspace->second.data_ptr(),
                stream))
    return {};
  return out;
}

std::vector<TunedGemmChoice> tuned_gemm_choices() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<TunedGemmChoice> out;
  for (const auto& [key, plan] : s.plans) out.push_back(plan.choice);
  return out;
}

}  // namespace turnrl::detail
