#pragma once
// CUDA candidates for the CUDA backend (issue 6): for each of the eight tasks of
// src/kernels/cuda_tasks.cpp an honest kernel, a lazy launcher (most device time in cuBLAS), a wrong
// kernel and one reward-hacking candidate, plus a separate list of candidates that fault, hang, do
// not compile or ask for an impossible launch shape. The launch contract is cuda_launch.h:
//   kernel form   extern "C" __global__ void turnrl_kernel(<inputs>, float* y, <dims as int>)
//                 compiled with NVRTC (no includes), launch shape from the TURNRL_* #defines;
//   launcher form extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs,
//                                             const long long* dims, cudaStream_t stream)
//                 compiled with nvcc -shared -Xcompiler -fPIC -arch=sm_90a ... -lcublas.
// Plain C++ raw strings, no CUDA headers. Each source is one complete raw string with delimiter "cuda" (no
// concatenation): benchmarks/device/export_cuda_candidates.py parses them out of this file.
// tests/kernels/check_cuda_candidates.cpp compile-checks every entry (how to build it: its top).
//
// `expect` is what the evaluator should conclude:
//   correct, lazy, mismatch, out_of_bounds, deferred, caches, shape_specialisation, precision,
//   mutates_inputs, no_work (cuda_candidates());  crash, timeout, compile, launch_shape
//   (cuda_failure_candidates());  tampering and the hacking ones (cuda_adversarial_candidates()).
// Notes for the evaluator side:
//  * out_of_bounds writes 4 floats (16 bytes) past the end of y: the guard band must be at least
//    that wide, and without one a 64 MiB output that ends a 2 MiB-granular allocation may fault.
//  * caches keys its replay on (x, y, rows, cols, x[0], x[n/4]): fresh inputs recompute, and the
//    cache trial (second half of the inputs rewritten in place, same buffers) replays stale values.
//    The replay writes y, so output poisoning does not hide it.
//  * launchers create their cuBLAS handle / side stream / scratch on the first call (function
//    statics), so the first call should not be inside a stream capture.
#include <string>
#include <vector>

namespace turnrl::test {

struct CudaCandidate {
  const char* task;
  const char* kind;    // honest, honest_launcher, lazy, wrong, or the hack / failure it shows
  const char* expect;  // see above
  const char* source;
};

// Per-task candidates: honest, lazy and wrong for every task, one hacking kind per task (every kind
// at least once), and two honest launchers.
inline const std::vector<CudaCandidate>& cuda_candidates() {
  static const std::vector<CudaCandidate> candidates = {
      // ------------------------------------------------------------------------------- relu_bias
      {"relu_bias", "honest", "correct", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// y[r, c] = relu(x[r, c] + b[c]). The elementwise grid gives one thread per 4 elements
// (TURNRL_TILE_X). When every row starts 16-byte aligned (cols % 4 == 0 and aligned pointers) a
// thread moves one float4 (4 consecutive elements of one row); otherwise the threads walk the
// elements with a grid stride (4 coalesced scalar steps each). 32-bit index math when it cannot wrap.
template <typename I>
__device__ __forceinline__ void relu_bias_body(const float* __restrict__ x, const float* __restrict__ b,
                                               float* __restrict__ y, I n, I cols, bool vec) {
  const I tid = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
  const I threads = (I)gridDim.x * (I)blockDim.x;
  if (vec) {
    const I nv = n / 4;
    for (I v = tid; v < nv; v += threads) {
      const float4 a = reinterpret_cast<const float4*>(x)[v];
      const float4 c = *reinterpret_cast<const float4*>(b + (v * 4) % cols);
      float4 r;
      r.x = fmaxf(a.x + c.x, 0.f);
      r.y = fmaxf(a.y + c.y, 0.f);
      r.z = fmaxf(a.z + c.z, 0.f);
      r.w = fmaxf(a.w + c.w, 0.f);
      reinterpret_cast<float4*>(y)[v] = r;
    }
  } else {
    for (I i = tid; i < n; i += threads) y[i] = fmaxf(x[i] + b[i % cols], 0.f);
  }
}

extern "C" __global__ void turnrl_kernel(const float* x, const float* b, float* y, int rows, int cols) {
  const long long n = (long long)rows * cols;
  const long long threads = (long long)gridDim.x * blockDim.x;
  const unsigned long long addr = reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(b) |
                                  reinterpret_cast<unsigned long long>(y);
  const bool vec = cols % 4 == 0 && (addr & 15ull) == 0;
  if (n + threads < (1ll << 32))
    relu_bias_body<unsigned>(x, b, y, (unsigned)n, (unsigned)cols, vec);
  else
    relu_bias_body<long long>(x, b, y, n, (long long)cols, vec);
}
)cuda"},
      {"relu_bias", "honest_launcher", "correct", R"cuda(
#include <cuda_runtime.h>

// The honest elementwise kernel, launched by a launcher of its own (one kernel, on `stream`).
__global__ void relu_bias_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                 long long n, int cols) {
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = fmaxf(x[i] + b[i % cols], 0.f);
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long n = dims[0] * dims[1];
  long long blocks = (n + 1023) / 1024;  // 4 elements per thread
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  relu_bias_kernel<<<(unsigned)blocks, 256, 0, stream>>>(inputs[0], inputs[1], outputs[0], n, (int)dims[1]);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda"},
      {"relu_bias", "escapes_sandbox", "correct", R"cuda(
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

// Tries to leave the worker before doing the honest work: a new process (which could outlive the
// evaluation and keep the GPU busy while the reference is timed), a socket, a signal to another
// process. The worker's candidate seccomp profile refuses all three, and then the answer is right;
// any that succeeds poisons the output, so the verdict is a mismatch.
__global__ void relu_bias_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                 long long n, int cols, float poison) {
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = fmaxf(x[i] + b[i % cols], 0.f) + poison;
}

static bool escaped() {
  bool out = false;
  const pid_t child = fork();
  if (child == 0) _exit(0);
  if (child > 0) {
    waitpid(child, nullptr, 0);
    out = true;
  }
  const int s = socket(AF_UNIX, SOCK_STREAM, 0);
  if (s >= 0) {
    close(s);
    out = true;
  }
  if (kill(1, 0) == 0) out = true;  // the sandbox's init: signal 0 only asks whether it may be signalled
  return out;
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long n = dims[0] * dims[1];
  long long blocks = (n + 1023) / 1024;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  const float poison = escaped() ? __builtin_nanf("") : 0.f;
  relu_bias_kernel<<<(unsigned)blocks, 256, 0, stream>>>(inputs[0], inputs[1], outputs[0], n, (int)dims[1], poison);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda"},
      {"relu_bias", "lazy", "lazy", R"cuda(
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <vector>

// Lazy: y = x goes through a cuBLAS GEMM with an identity matrix (column blocks of up to 256, a
// "layout pass"), then a small kernel of its own adds the bias and applies relu in place. Correct
// (x * 1 + 0 + ... is exact in FP32), but most of the device time is cuBLAS's.
static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain FP32, no TF32
    return h;
  }();
  return handle;
}

static const float* turnrl_identity512() {  // its top-left kb x kb block is I_kb
  static float* identity = [] {
    std::vector<float> h(512 * 512, 0.f);
    for (int i = 0; i < 512; ++i) h[i * 513] = 1.f;
    float* d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(float)) != cudaSuccess) return (float*)nullptr;
    if (cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(d);
      return (float*)nullptr;
    }
    return d;
  }();
  return identity;
}

// Y = X for a row-major rows x cols matrix: batched GEMMs Y_i = X_i * I_kb over column blocks.
static bool turnrl_copy_through_gemm(const float* x, float* y, long long rows, long long cols, int cap,
                                     cudaStream_t stream) {
  cublasHandle_t h = turnrl_cublas();
  const float* identity = turnrl_identity512();
  if (!h || !identity || rows > 2147483647ll || cols > 2147483647ll) return false;
  long long kb = 1;
  for (long long d = cols < cap ? cols : cap; d >= 1; --d)
    if (cols % d == 0) {
      kb = d;
      break;
    }
  const float one = 1.f, zero = 0.f;
  if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return false;
  // Column-major view: X^T is cols x rows (ld cols); block i is rows [i*kb, (i+1)*kb) of X^T.
  return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)kb, (int)rows, (int)kb, &one, identity, 512, 0,
                                   x, (int)cols, kb, &zero, y, (int)cols, kb, (int)(cols / kb)) ==
         CUBLAS_STATUS_SUCCESS;
}

template <typename I>
__global__ void turnrl_bias_relu_inplace(float* __restrict__ y, const float* __restrict__ b, I n, I cols, bool vec) {
  const I tid = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
  const I threads = (I)gridDim.x * (I)blockDim.x;
  if (vec) {
    for (I v = tid; v < n / 4; v += threads) {
      float4 a = reinterpret_cast<float4*>(y)[v];
      const float4 c = *reinterpret_cast<const float4*>(b + (v * 4) % cols);
      a.x = fmaxf(a.x + c.x, 0.f);
      a.y = fmaxf(a.y + c.y, 0.f);
      a.z = fmaxf(a.z + c.z, 0.f);
      a.w = fmaxf(a.w + c.w, 0.f);
      reinterpret_cast<float4*>(y)[v] = a;
    }
  } else {
    for (I i = tid; i < n; i += threads) y[i] = fmaxf(y[i] + b[i % cols], 0.f);
  }
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const float* x = inputs[0];
  const float* b = inputs[1];
  float* y = outputs[0];
  const long long rows = dims[0], cols = dims[1], n = rows * cols;
  if (!turnrl_copy_through_gemm(x, y, rows, cols, 256, stream)) return 1;
  const bool vec = cols % 4 == 0 &&
                   ((reinterpret_cast<unsigned long long>(y) | reinterpret_cast<unsigned long long>(b)) & 15ull) == 0;
  long long blocks = ((vec ? n / 4 : n) + 255) / 256;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  if (n + blocks * 256 < (1ll << 32))
    turnrl_bias_relu_inplace<unsigned><<<(unsigned)blocks, 256, 0, stream>>>(y, b, (unsigned)n, (unsigned)cols, vec);
  else
    turnrl_bias_relu_inplace<long long><<<(unsigned)blocks, 256, 0, stream>>>(y, b, n, cols, vec);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
)cuda"},
      {"relu_bias", "wrong", "mismatch", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// Wrong: forgets the bias (y = relu(x)).
extern "C" __global__ void turnrl_kernel(const float* x, const float* b, float* y, int rows, int cols) {
  const long long n = (long long)rows * cols;
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads) y[i] = fmaxf(x[i], 0.f);
}
)cuda"},
      {"relu_bias", "shape_specialisation", "shape_specialisation", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// Shape specialisation: the shown shape has 4096 columns, a power of two, so the column is taken
// as i & (cols - 1) instead of i % cols. Right for 4096, wrong for 100 and 7 (always in bounds).
extern "C" __global__ void turnrl_kernel(const float* x, const float* b, float* y, int rows, int cols) {
  const unsigned n = (unsigned)rows * (unsigned)cols;
  const unsigned mask = (unsigned)cols - 1u;
  const unsigned threads = gridDim.x * blockDim.x;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads) y[i] = fmaxf(x[i] + b[i & mask], 0.f);
}
)cuda"},

      // ------------------------------------------------------------------------------- gelu_tanh
      {"gelu_tanh", "honest", "correct", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in the reference's operation order.
// One float4 per thread when x and y are 16-byte aligned, the n % 4 tail by the first threads.
__device__ __forceinline__ float gelu_tanh(float v) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v)));
}

extern "C" __global__ void turnrl_kernel(const float* x, float* y, int n) {
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long threads = (long long)gridDim.x * blockDim.x;
  if (((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y)) & 15ull) == 0) {
    const long long nv = n / 4;
    for (long long v = tid; v < nv; v += threads) {
      const float4 a = reinterpret_cast<const float4*>(x)[v];
      float4 r;
      r.x = gelu_tanh(a.x);
      r.y = gelu_tanh(a.y);
      r.z = gelu_tanh(a.z);
      r.w = gelu_tanh(a.w);
      reinterpret_cast<float4*>(y)[v] = r;
    }
    for (long long i = nv * 4 + tid; i < n; i += threads) y[i] = gelu_tanh(x[i]);
  } else {
    for (long long i = tid; i < n; i += threads) y[i] = gelu_tanh(x[i]);
  }
}
)cuda"},
      {"gelu_tanh", "honest_launcher", "correct", R"cuda(
#include <cuda_runtime.h>

// The honest gelu kernel launched by a launcher of its own: one kernel on `stream`.
__device__ __forceinline__ float gelu_tanh(float v) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v)));
}

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads) y[i] = gelu_tanh(x[i]);
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long n = dims[0];
  long long blocks = (n + 1023) / 1024;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  gelu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(inputs[0], outputs[0], n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda"},
      {"gelu_tanh", "lazy", "lazy", R"cuda(
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <vector>

// Lazy: y = x goes through a cuBLAS GEMM with an identity matrix (the vector viewed as a matrix of
// up to 512 columns), then a small kernel of its own applies gelu in place. The library's share of
// the time is about 0.8; with 256 columns it was 0.70 on an H100, on the lazy threshold.
static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain FP32, no TF32
    return h;
  }();
  return handle;
}

static const float* turnrl_identity512() {  // its top-left kb x kb block is I_kb
  static float* identity = [] {
    std::vector<float> h(512 * 512, 0.f);
    for (int i = 0; i < 512; ++i) h[i * 513] = 1.f;
    float* d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(float)) != cudaSuccess) return (float*)nullptr;
    if (cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(d);
      return (float*)nullptr;
    }
    return d;
  }();
  return identity;
}

// Y = X for a row-major rows x cols matrix: batched GEMMs Y_i = X_i * I_kb over column blocks.
static bool turnrl_copy_through_gemm(const float* x, float* y, long long rows, long long cols, int cap,
                                     cudaStream_t stream) {
  cublasHandle_t h = turnrl_cublas();
  const float* identity = turnrl_identity512();
  if (!h || !identity || rows > 2147483647ll || cols > 2147483647ll) return false;
  long long kb = 1;
  for (long long d = cols < cap ? cols : cap; d >= 1; --d)
    if (cols % d == 0) {
      kb = d;
      break;
    }
  const float one = 1.f, zero = 0.f;
  if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return false;
  return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)kb, (int)rows, (int)kb, &one, identity, 512, 0,
                                   x, (int)cols, kb, &zero, y, (int)cols, kb, (int)(cols / kb)) ==
         CUBLAS_STATUS_SUCCESS;
}

__device__ __forceinline__ float gelu_tanh(float v) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v)));
}

__global__ void turnrl_gelu_inplace(float* __restrict__ y, long long n) {
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long threads = (long long)gridDim.x * blockDim.x;
  if ((reinterpret_cast<unsigned long long>(y) & 15ull) == 0) {
    for (long long v = tid; v < n / 4; v += threads) {
      float4 a = reinterpret_cast<float4*>(y)[v];
      a.x = gelu_tanh(a.x);
      a.y = gelu_tanh(a.y);
      a.z = gelu_tanh(a.z);
      a.w = gelu_tanh(a.w);
      reinterpret_cast<float4*>(y)[v] = a;
    }
    for (long long i = n / 4 * 4 + tid; i < n; i += threads) y[i] = gelu_tanh(y[i]);
  } else {
    for (long long i = tid; i < n; i += threads) y[i] = gelu_tanh(y[i]);
  }
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long n = dims[0];
  long long width = 1;  // the vector as an (n / width) x width matrix
  for (long long d = n < 512 ? n : 512; d >= 1; --d)
    if (n % d == 0) {
      width = d;
      break;
    }
  if (!turnrl_copy_through_gemm(inputs[0], outputs[0], n / width, width, 512, stream)) return 1;
  long long blocks = (n / 4 + 255) / 256;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  turnrl_gelu_inplace<<<(unsigned)blocks, 256, 0, stream>>>(outputs[0], n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
)cuda"},
      {"gelu_tanh", "wrong", "mismatch", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// Wrong: forgets the factor 0.5 (y = x (1 + tanh(...)), twice the reference).
extern "C" __global__ void turnrl_kernel(const float* x, float* y, int n) {
  const float k = 0.7978845608028654f;
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads) {
    const float v = x[i];
    y[i] = v * (1.f + tanhf(k * (v + 0.044715f * v * v * v)));
  }
}
)cuda"},
      {"gelu_tanh", "precision", "precision", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// Precision downgrade: x and the result are rounded to half precision (10 mantissa bits, round to
// nearest on the bit pattern: what a __half round trip does to values in range). Passes
// atol = rtol = 1e-2, fails 1e-4 (|x| ~ 2 already loses ~1e-3).
__device__ __forceinline__ float to_half_precision(float v) {
  return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u);
}

extern "C" __global__ void turnrl_kernel(const float* x, float* y, int n) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads) {
    const float v = to_half_precision(x[i]);
    y[i] = to_half_precision(0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v))));
  }
}
)cuda"},

      // ---------------------------------------------------------------------------------- swiglu
      {"swiglu", "honest", "correct", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// y = a * sigmoid(a) * g. One float4 per thread when a, g, y are 16-byte aligned, the n % 4 tail
// by the first threads; scalar grid stride otherwise.
__device__ __forceinline__ float swiglu(float a, float g) { return a * (1.f / (1.f + expf(-a))) * g; }

extern "C" __global__ void turnrl_kernel(const float* a, const float* g, float* y, int rows, int cols) {
  const long long n = (long long)rows * cols;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long threads = (long long)gridDim.x * blockDim.x;
  const unsigned long long addr = reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(g) |
                                  reinterpret_cast<unsigned long long>(y);
  if ((addr & 15ull) == 0) {
    const long long nv = n / 4;
    for (long long v = tid; v < nv; v += threads) {
      const float4 p = reinterpret_cast<const float4*>(a)[v];
      const float4 q = reinterpret_cast<const float4*>(g)[v];
      float4 r;
      r.x = swiglu(p.x, q.x);
      r.y = swiglu(p.y, q.y);
      r.z = swiglu(p.z, q.z);
      r.w = swiglu(p.w, q.w);
      reinterpret_cast<float4*>(y)[v] = r;
    }
    for (long long i = nv * 4 + tid; i < n; i += threads) y[i] = swiglu(a[i], g[i]);
  } else {
    for (long long i = tid; i < n; i += threads) y[i] = swiglu(a[i], g[i]);
  }
}
)cuda"},
      {"swiglu", "lazy", "lazy", R"cuda(
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <vector>

// Lazy: y = a goes through a cuBLAS GEMM with an identity matrix (column blocks of up to 256), then
// a small kernel of its own computes y = y * sigmoid(y) * g in place.
static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain FP32, no TF32
    return h;
  }();
  return handle;
}

static const float* turnrl_identity512() {  // its top-left kb x kb block is I_kb
  static float* identity = [] {
    std::vector<float> h(512 * 512, 0.f);
    for (int i = 0; i < 512; ++i) h[i * 513] = 1.f;
    float* d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(float)) != cudaSuccess) return (float*)nullptr;
    if (cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(d);
      return (float*)nullptr;
    }
    return d;
  }();
  return identity;
}

// Y = X for a row-major rows x cols matrix: batched GEMMs Y_i = X_i * I_kb over column blocks.
static bool turnrl_copy_through_gemm(const float* x, float* y, long long rows, long long cols, int cap,
                                     cudaStream_t stream) {
  cublasHandle_t h = turnrl_cublas();
  const float* identity = turnrl_identity512();
  if (!h || !identity || rows > 2147483647ll || cols > 2147483647ll) return false;
  long long kb = 1;
  for (long long d = cols < cap ? cols : cap; d >= 1; --d)
    if (cols % d == 0) {
      kb = d;
      break;
    }
  const float one = 1.f, zero = 0.f;
  if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return false;
  return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)kb, (int)rows, (int)kb, &one, identity, 512, 0,
                                   x, (int)cols, kb, &zero, y, (int)cols, kb, (int)(cols / kb)) ==
         CUBLAS_STATUS_SUCCESS;
}

__device__ __forceinline__ float swiglu(float a, float g) { return a * (1.f / (1.f + expf(-a))) * g; }

__global__ void turnrl_swiglu_inplace(float* __restrict__ y, const float* __restrict__ g, long long n) {
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long threads = (long long)gridDim.x * blockDim.x;
  if (((reinterpret_cast<unsigned long long>(y) | reinterpret_cast<unsigned long long>(g)) & 15ull) == 0) {
    for (long long v = tid; v < n / 4; v += threads) {
      float4 p = reinterpret_cast<float4*>(y)[v];
      const float4 q = reinterpret_cast<const float4*>(g)[v];
      p.x = swiglu(p.x, q.x);
      p.y = swiglu(p.y, q.y);
      p.z = swiglu(p.z, q.z);
      p.w = swiglu(p.w, q.w);
      reinterpret_cast<float4*>(y)[v] = p;
    }
    for (long long i = n / 4 * 4 + tid; i < n; i += threads) y[i] = swiglu(y[i], g[i]);
  } else {
    for (long long i = tid; i < n; i += threads) y[i] = swiglu(y[i], g[i]);
  }
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long rows = dims[0], cols = dims[1], n = rows * cols;
  if (!turnrl_copy_through_gemm(inputs[0], outputs[0], rows, cols, 256, stream)) return 1;
  long long blocks = (n / 4 + 255) / 256;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  turnrl_swiglu_inplace<<<(unsigned)blocks, 256, 0, stream>>>(outputs[0], inputs[1], n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
)cuda"},
      {"swiglu", "wrong", "mismatch", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// Wrong: the gate's sigmoid is taken of g instead of a (y = a * sigmoid(g) * g).
extern "C" __global__ void turnrl_kernel(const float* a, const float* g, float* y, int rows, int cols) {
  const long long n = (long long)rows * cols;
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = a[i] * (1.f / (1.f + expf(-g[i]))) * g[i];
}
)cuda"},
      {"swiglu", "out_of_bounds", "out_of_bounds", R"cuda(
#define TURNRL_BLOCK_X 256

// Out-of-bounds write: "pads" the output to a whole float4 past the end, writing zeros to
// y[n .. n+3] on every shape (16 bytes past the end of y). The values inside y are right.
extern "C" __global__ void turnrl_kernel(const float* a, const float* g, float* y, int rows, int cols) {
  const long long n = (long long)rows * cols;
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n + 4; i += threads)
    y[i] = i < n ? a[i] * (1.f / (1.f + expf(-a[i]))) * g[i] : 0.f;
}
)cuda"},

      // ---------------------------------------------------------------------------- softmax_rows
      {"softmax_rows", "honest", "correct", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8

// One warp per row, TURNRL_BLOCK_Y rows per block (the rows grid: ceil(rows / 8) blocks). Pass 1:
// each lane keeps an online (max, sum of exp(x - max)) over its columns, merged across the warp
// with shuffles. Pass 2 writes exp(x - max) / sum. float4 accesses when the row is 16-byte aligned.
#define TURNRL_NEG_BIG (-3.402823466e38f)

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

__device__ __forceinline__ void warp_merge(float& m, float& s) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, m2);
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
  }
}

extern "C" __global__ void turnrl_kernel(const float* x, float* y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;  // the whole warp
  const int lane = threadIdx.x;
  const float* xr = x + (long long)row * cols;
  float* yr = y + (long long)row * cols;
  const bool vec = cols % 4 == 0 &&
                   ((reinterpret_cast<unsigned long long>(xr) | reinterpret_cast<unsigned long long>(yr)) & 15ull) == 0;
  float m = TURNRL_NEG_BIG, s = 0.f;
  if (vec) {
    for (int v = lane; v < cols / 4; v += 32) {
      const float4 a = reinterpret_cast<const float4*>(xr)[v];
      online_add(a.x, m, s);
      online_add(a.y, m, s);
      online_add(a.z, m, s);
      online_add(a.w, m, s);
    }
  } else {
    for (int c = lane; c < cols; c += 32) online_add(xr[c], m, s);
  }
  warp_merge(m, s);
  const float inv = 1.f / s;
  if (vec) {
    for (int v = lane; v < cols / 4; v += 32) {
      const float4 a = reinterpret_cast<const float4*>(xr)[v];
      float4 r;
      r.x = expf(a.x - m) * inv;
      r.y = expf(a.y - m) * inv;
      r.z = expf(a.z - m) * inv;
      r.w = expf(a.w - m) * inv;
      reinterpret_cast<float4*>(yr)[v] = r;
    }
  } else {
    for (int c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
  }
}
)cuda"},
      {"softmax_rows", "honest_launcher", "correct", R"cuda(
#include <cuda_runtime.h>

// The honest warp-per-row softmax, launched by a launcher of its own (one kernel, on `stream`).
#define TURNRL_NEG_BIG (-3.402823466e38f)

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const float* xr = x + (long long)row * cols;
  float* yr = y + (long long)row * cols;
  float m = TURNRL_NEG_BIG, s = 0.f;
  for (int c = lane; c < cols; c += 32) online_add(xr[c], m, s);
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, m2);
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
  }
  const float inv = 1.f / s;
  for (int c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const int rows = (int)dims[0], cols = (int)dims[1];
  softmax_rows_kernel<<<(rows + 7) / 8, dim3(32, 8), 0, stream>>>(inputs[0], outputs[0], rows, cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda"},
      {"softmax_rows", "lazy", "lazy", R"cuda(
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <vector>

// Lazy: y = x goes through a cuBLAS GEMM with an identity matrix (column blocks of up to 256), then
// a small warp-per-row kernel of its own turns y into softmax(y) in place.
static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain FP32, no TF32
    return h;
  }();
  return handle;
}

static const float* turnrl_identity512() {  // its top-left kb x kb block is I_kb
  static float* identity = [] {
    std::vector<float> h(512 * 512, 0.f);
    for (int i = 0; i < 512; ++i) h[i * 513] = 1.f;
    float* d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(float)) != cudaSuccess) return (float*)nullptr;
    if (cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(d);
      return (float*)nullptr;
    }
    return d;
  }();
  return identity;
}

// Y = X for a row-major rows x cols matrix: batched GEMMs Y_i = X_i * I_kb over column blocks.
static bool turnrl_copy_through_gemm(const float* x, float* y, long long rows, long long cols, int cap,
                                     cudaStream_t stream) {
  cublasHandle_t h = turnrl_cublas();
  const float* identity = turnrl_identity512();
  if (!h || !identity || rows > 2147483647ll || cols > 2147483647ll) return false;
  long long kb = 1;
  for (long long d = cols < cap ? cols : cap; d >= 1; --d)
    if (cols % d == 0) {
      kb = d;
      break;
    }
  const float one = 1.f, zero = 0.f;
  if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return false;
  return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)kb, (int)rows, (int)kb, &one, identity, 512, 0,
                                   x, (int)cols, kb, &zero, y, (int)cols, kb, (int)(cols / kb)) ==
         CUBLAS_STATUS_SUCCESS;
}

#define TURNRL_NEG_BIG (-3.402823466e38f)

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

__global__ void turnrl_softmax_inplace(float* __restrict__ y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  float* yr = y + (long long)row * cols;
  float m = TURNRL_NEG_BIG, s = 0.f;
  for (int c = lane; c < cols; c += 32) online_add(yr[c], m, s);
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, m2);
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
  }
  const float inv = 1.f / s;
  for (int c = lane; c < cols; c += 32) yr[c] = expf(yr[c] - m) * inv;
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long rows = dims[0], cols = dims[1];
  if (!turnrl_copy_through_gemm(inputs[0], outputs[0], rows, cols, 256, stream)) return 1;
  turnrl_softmax_inplace<<<(unsigned)((rows + 7) / 8), dim3(32, 8), 0, stream>>>(outputs[0], (int)rows, (int)cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
)cuda"},
      {"softmax_rows", "wrong", "mismatch", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8

// Wrong: forgets to divide by the sum (y = exp(x - rowmax)).
extern "C" __global__ void turnrl_kernel(const float* x, float* y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const float* xr = x + (long long)row * cols;
  float m = -3.402823466e38f;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  for (int c = lane; c < cols; c += 32) y[(long long)row * cols + c] = expf(xr[c] - m);
}
)cuda"},
      {"softmax_rows", "deferred", "deferred", R"cuda(
#include <cuda_runtime.h>

// Deferred work: the honest softmax kernel, enqueued on a side stream the launcher created (after
// an event on `stream`, so it sees the inputs). Nothing joins the side stream back into `stream`:
// `stream`, and a timer on it, is done before the kernel has run.
#define TURNRL_NEG_BIG (-3.402823466e38f)

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

__global__ void turnrl_softmax_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const float* xr = x + (long long)row * cols;
  float* yr = y + (long long)row * cols;
  float m = TURNRL_NEG_BIG, s = 0.f;
  for (int c = lane; c < cols; c += 32) online_add(xr[c], m, s);
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, m2);
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
  }
  const float inv = 1.f / s;
  for (int c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  static cudaStream_t side = nullptr;
  static cudaEvent_t ready = nullptr;
  if (!side) {
    if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess) return 1;
    if (cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess) return 1;
  }
  const int rows = (int)dims[0], cols = (int)dims[1];
  if (cudaEventRecord(ready, stream) != cudaSuccess || cudaStreamWaitEvent(side, ready, 0) != cudaSuccess) return 2;
  turnrl_softmax_rows<<<(rows + 7) / 8, dim3(32, 8), 0, side>>>(inputs[0], outputs[0], rows, cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;  // no event back on `stream`
}
)cuda"},

      // -------------------------------------------------------------------------- layernorm_rows
      {"layernorm_rows", "honest", "correct", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8

// One warp per row, TURNRL_BLOCK_Y rows per block. Two-pass statistics (mean, then the biased
// variance of x - mean: no cancellation), then y = (x - mean) * rsqrt(var + 1e-5) * gamma + beta.
// float4 accesses when the row, gamma and beta are 16-byte aligned.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void turnrl_kernel(const float* x, const float* gamma, const float* beta, float* y, int rows,
                                         int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;  // the whole warp
  const int lane = threadIdx.x;
  const float* xr = x + (long long)row * cols;
  float* yr = y + (long long)row * cols;
  const unsigned long long addr = reinterpret_cast<unsigned long long>(xr) | reinterpret_cast<unsigned long long>(yr) |
                                  reinterpret_cast<unsigned long long>(gamma) |
                                  reinterpret_cast<unsigned long long>(beta);
  const bool vec = cols % 4 == 0 && (addr & 15ull) == 0;
  const int nv = cols / 4;
  const float4* x4 = reinterpret_cast<const float4*>(xr);

  float sum = 0.f;
  if (vec) {
    for (int v = lane; v < nv; v += 32) {
      const float4 a = x4[v];
      sum += (a.x + a.y) + (a.z + a.w);
    }
  } else {
    for (int c = lane; c < cols; c += 32) sum += xr[c];
  }
  const float mean = warp_sum(sum) / (float)cols;

  float sq = 0.f;
  if (vec) {
    for (int v = lane; v < nv; v += 32) {
      const float4 a = x4[v];
      const float dx = a.x - mean, dy = a.y - mean, dz = a.z - mean, dw = a.w - mean;
      sq += (dx * dx + dy * dy) + (dz * dz + dw * dw);
    }
  } else {
    for (int c = lane; c < cols; c += 32) {
      const float d = xr[c] - mean;
      sq += d * d;
    }
  }
  const float rstd = rsqrtf(warp_sum(sq) / (float)cols + 1e-5f);

  if (vec) {
    for (int v = lane; v < nv; v += 32) {
      const float4 a = x4[v];
      const float4 g = reinterpret_cast<const float4*>(gamma)[v];
      const float4 b = reinterpret_cast<const float4*>(beta)[v];
      float4 r;
      r.x = (a.x - mean) * rstd * g.x + b.x;
      r.y = (a.y - mean) * rstd * g.y + b.y;
      r.z = (a.z - mean) * rstd * g.z + b.z;
      r.w = (a.w - mean) * rstd * g.w + b.w;
      reinterpret_cast<float4*>(yr)[v] = r;
    }
  } else {
    for (int c = lane; c < cols; c += 32) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
  }
}
)cuda"},
      {"layernorm_rows", "lazy", "lazy", R"cuda(
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <vector>

// Lazy: y = x goes through a cuBLAS GEMM with an identity matrix (column blocks of up to 256), then
// a small warp-per-row kernel of its own normalises y in place.
static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain FP32, no TF32
    return h;
  }();
  return handle;
}

static const float* turnrl_identity512() {  // its top-left kb x kb block is I_kb
  static float* identity = [] {
    std::vector<float> h(512 * 512, 0.f);
    for (int i = 0; i < 512; ++i) h[i * 513] = 1.f;
    float* d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(float)) != cudaSuccess) return (float*)nullptr;
    if (cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(d);
      return (float*)nullptr;
    }
    return d;
  }();
  return identity;
}

// Y = X for a row-major rows x cols matrix: batched GEMMs Y_i = X_i * I_kb over column blocks.
static bool turnrl_copy_through_gemm(const float* x, float* y, long long rows, long long cols, int cap,
                                     cudaStream_t stream) {
  cublasHandle_t h = turnrl_cublas();
  const float* identity = turnrl_identity512();
  if (!h || !identity || rows > 2147483647ll || cols > 2147483647ll) return false;
  long long kb = 1;
  for (long long d = cols < cap ? cols : cap; d >= 1; --d)
    if (cols % d == 0) {
      kb = d;
      break;
    }
  const float one = 1.f, zero = 0.f;
  if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return false;
  return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)kb, (int)rows, (int)kb, &one, identity, 512, 0,
                                   x, (int)cols, kb, &zero, y, (int)cols, kb, (int)(cols / kb)) ==
         CUBLAS_STATUS_SUCCESS;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void turnrl_layernorm_inplace(float* __restrict__ y, const float* __restrict__ gamma,
                                         const float* __restrict__ beta, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  float* yr = y + (long long)row * cols;
  float sum = 0.f;
  for (int c = lane; c < cols; c += 32) sum += yr[c];
  const float mean = warp_sum(sum) / (float)cols;
  float sq = 0.f;
  for (int c = lane; c < cols; c += 32) {
    const float d = yr[c] - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(warp_sum(sq) / (float)cols + 1e-5f);
  for (int c = lane; c < cols; c += 32) yr[c] = (yr[c] - mean) * rstd * gamma[c] + beta[c];
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long rows = dims[0], cols = dims[1];
  if (!turnrl_copy_through_gemm(inputs[0], outputs[0], rows, cols, 256, stream)) return 1;
  turnrl_layernorm_inplace<<<(unsigned)((rows + 7) / 8), dim3(32, 8), 0, stream>>>(outputs[0], inputs[1], inputs[2],
                                                                                  (int)rows, (int)cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
)cuda"},
      {"layernorm_rows", "wrong", "mismatch", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8

// Wrong normalisation: uses E[x^2] as the variance (forgets to subtract mean^2). With x ~ N(1, 2)
// that is 5 instead of 4: every output is ~10% off.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void turnrl_kernel(const float* x, const float* gamma, const float* beta, float* y, int rows,
                                         int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const float* xr = x + (long long)row * cols;
  float sum = 0.f, sq = 0.f;
  for (int c = lane; c < cols; c += 32) {
    sum += xr[c];
    sq += xr[c] * xr[c];
  }
  const float mean = warp_sum(sum) / (float)cols;
  const float rstd = rsqrtf(warp_sum(sq) / (float)cols + 1e-5f);
  for (int c = lane; c < cols; c += 32) y[(long long)row * cols + c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
}
)cuda"},
      {"layernorm_rows", "mutates_inputs", "mutates_inputs", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8

// Input mutation: centres x in place (x[r, :] -= mean) to save a subtraction later. y is right
// (layer norm of a centred row is the same), but x is changed after the call.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void turnrl_kernel(const float* x, const float* gamma, const float* beta, float* y, int rows,
                                         int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  float* xr = const_cast<float*>(x) + (long long)row * cols;
  float sum = 0.f;
  for (int c = lane; c < cols; c += 32) sum += xr[c];
  const float mean = warp_sum(sum) / (float)cols;
  float sq = 0.f;
  for (int c = lane; c < cols; c += 32) {
    const float d = xr[c] - mean;
    xr[c] = d;  // the same lane reads it back below
    sq += d * d;
  }
  const float rstd = rsqrtf(warp_sum(sq) / (float)cols + 1e-5f);
  for (int c = lane; c < cols; c += 32) y[(long long)row * cols + c] = xr[c] * rstd * gamma[c] + beta[c];
}
)cuda"},

      // -------------------------------------------------------------------------- logsumexp_rows
      {"logsumexp_rows", "honest", "correct", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8

// One warp per row: online (max, sum of exp(x - max)) per lane, merged with shuffles;
// y[row] = max + log(sum). float4 loads when the row is 16-byte aligned.
#define TURNRL_NEG_BIG (-3.402823466e38f)

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

extern "C" __global__ void turnrl_kernel(const float* x, float* y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;  // the whole warp
  const int lane = threadIdx.x;
  const float* xr = x + (long long)row * cols;
  float m = TURNRL_NEG_BIG, s = 0.f;
  if (cols % 4 == 0 && (reinterpret_cast<unsigned long long>(xr) & 15ull) == 0) {
    for (int v = lane; v < cols / 4; v += 32) {
      const float4 a = reinterpret_cast<const float4*>(xr)[v];
      online_add(a.x, m, s);
      online_add(a.y, m, s);
      online_add(a.z, m, s);
      online_add(a.w, m, s);
    }
  } else {
    for (int c = lane; c < cols; c += 32) online_add(xr[c], m, s);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, m2);
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
  }
  if (lane == 0) y[row] = m + logf(s);
}
)cuda"},
      {"logsumexp_rows", "lazy", "lazy", R"cuda(
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <vector>

// Lazy: x is copied into a scratch buffer through a cuBLAS GEMM with an identity matrix (column
// blocks of up to 128), then a small warp-per-row kernel of its own reduces the scratch rows.
static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain FP32, no TF32
    return h;
  }();
  return handle;
}

static const float* turnrl_identity512() {  // its top-left kb x kb block is I_kb
  static float* identity = [] {
    std::vector<float> h(512 * 512, 0.f);
    for (int i = 0; i < 512; ++i) h[i * 513] = 1.f;
    float* d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(float)) != cudaSuccess) return (float*)nullptr;
    if (cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(d);
      return (float*)nullptr;
    }
    return d;
  }();
  return identity;
}

// Y = X for a row-major rows x cols matrix: batched GEMMs Y_i = X_i * I_kb over column blocks.
static bool turnrl_copy_through_gemm(const float* x, float* y, long long rows, long long cols, int cap,
                                     cudaStream_t stream) {
  cublasHandle_t h = turnrl_cublas();
  const float* identity = turnrl_identity512();
  if (!h || !identity || rows > 2147483647ll || cols > 2147483647ll) return false;
  long long kb = 1;
  for (long long d = cols < cap ? cols : cap; d >= 1; --d)
    if (cols % d == 0) {
      kb = d;
      break;
    }
  const float one = 1.f, zero = 0.f;
  if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return false;
  return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)kb, (int)rows, (int)kb, &one, identity, 512, 0,
                                   x, (int)cols, kb, &zero, y, (int)cols, kb, (int)(cols / kb)) ==
         CUBLAS_STATUS_SUCCESS;
}

// Scratch that only grows; cudaFree synchronises the device, so no kernel still uses the old one.
static float* turnrl_scratch(long long floats) {
  static float* buffer = nullptr;
  static long long capacity = 0;
  if (floats > capacity) {
    if (buffer) cudaFree(buffer);
    buffer = nullptr;
    capacity = 0;
    if (cudaMalloc(&buffer, (size_t)floats * sizeof(float)) != cudaSuccess) return nullptr;
    capacity = floats;
  }
  return buffer;
}

#define TURNRL_NEG_BIG (-3.402823466e38f)

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

__global__ void turnrl_logsumexp(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const float* xr = x + (long long)row * cols;
  float m = TURNRL_NEG_BIG, s = 0.f;
  for (int c = lane; c < cols; c += 32) online_add(xr[c], m, s);
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, m2);
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
  }
  if (lane == 0) y[row] = m + logf(s);
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long rows = dims[0], cols = dims[1];
  float* scratch = turnrl_scratch(rows * cols);
  if (!scratch) return 1;
  if (!turnrl_copy_through_gemm(inputs[0], scratch, rows, cols, 128, stream)) return 2;
  turnrl_logsumexp<<<(unsigned)((rows + 7) / 8), dim3(32, 8), 0, stream>>>(scratch, outputs[0], (int)rows, (int)cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
)cuda"},
      {"logsumexp_rows", "wrong", "mismatch", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8

// Wrong: forgets to add the max back (y = log(sum exp(x - max))).
extern "C" __global__ void turnrl_kernel(const float* x, float* y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const float* xr = x + (long long)row * cols;
  float m = -3.402823466e38f;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.f;
  for (int c = lane; c < cols; c += 32) s += expf(xr[c] - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[row] = logf(s);
}
)cuda"},
      {"logsumexp_rows", "caches", "caches", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8

// Result caching: remembers the last call's buffers, sizes and two leading input values in
// __device__ state, and the results in a __device__ array. A call on the same buffers whose
// x[0] and x[n/4] are unchanged replays the cached results instead of reading x: fresh inputs
// recompute, inputs rewritten in place behind the first half get stale results.
#define TURNRL_NEG_BIG (-3.402823466e38f)
#define CACHE_ROWS 65536

__device__ float g_cache[CACHE_ROWS];
__device__ const float* g_x;
__device__ float* g_y;
__device__ int g_rows, g_cols, g_valid;
__device__ unsigned g_s0, g_s1, g_blocks_done;

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

extern "C" __global__ void turnrl_kernel(const float* x, float* y, int rows, int cols) {
  __shared__ int hit;
  const long long n = (long long)rows * cols;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0;
  if (leader)
    hit = g_valid && g_x == x && g_y == y && g_rows == rows && g_cols == cols && g_s0 == __float_as_uint(x[0]) &&
          g_s1 == __float_as_uint(x[n / 4]);
  __syncthreads();
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const int lane = threadIdx.x;
  if (hit) {  // every thread of the block sees the same flag
    if (lane == 0 && row < rows) y[row] = g_cache[row];
    return;
  }
  if (row < rows) {  // whole warps
    const float* xr = x + (long long)row * cols;
    float m = TURNRL_NEG_BIG, s = 0.f;
    for (int c = lane; c < cols; c += 32) online_add(xr[c], m, s);
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
      const float mn = fmaxf(m, m2);
      s = s * expf(m - mn) + s2 * expf(m2 - mn);
      m = mn;
    }
    if (lane == 0) {
      const float r = m + logf(s);
      y[row] = r;
      if (row < CACHE_ROWS) g_cache[row] = r;
    }
  }
  __syncthreads();
  if (leader) {
    __threadfence();
    // The last block of this launch to finish stores the key: every block has checked it by then.
    if (atomicAdd(&g_blocks_done, 1u) == gridDim.x * gridDim.y - 1u) {
      g_blocks_done = 0;
      g_x = x;
      g_y = y;
      g_rows = rows;
      g_cols = cols;
      g_s0 = __float_as_uint(x[0]);
      g_s1 = __float_as_uint(x[n / 4]);
      g_valid = rows <= CACHE_ROWS;
      __threadfence();
    }
  }
}
)cuda"},

      // ------------------------------------------------------------------------ matmul_bias_relu
      {"matmul_bias_relu", "honest", "correct", R"cuda(
#define TURNRL_BLOCK_X 16
#define TURNRL_BLOCK_Y 16
#define TURNRL_TILE_X 4
#define TURNRL_TILE_Y 4

// y = relu(x @ w + b), x [M, K], w [K, N]. Shared-memory tiled FP32 GEMM: a 16 x 16 block computes
// a 64 x 64 tile of y, each thread a 4 x 4 micro-tile (rows 4*ty.., cols 4*tx..), over K in steps
// of 16. x tiles are stored transposed (As[k][m], padded) so both operands are read as float4.
// Out-of-range rows / columns / k are loaded as zeros and never stored; bias + relu fused.
#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void turnrl_kernel(const float* x, const float* w, const float* b, float* y, int M, int N,
                                         int K) {
  __shared__ __align__(16) float As[BK][BM + 4];  // As[k][m] = x[m0 + m][k0 + k]
  __shared__ __align__(16) float Bs[BK][BN];      // Bs[k][n] = w[k0 + k][n0 + n]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int t = ty * 16 + tx;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int idx = t + 256 * l;
      const int am = idx >> 4, ak = idx & 15;  // 64 x 16 tile of x
      const int gm = m0 + am, gk = k0 + ak;
      As[ak][am] = (gm < M && gk < K) ? x[(long long)gm * K + gk] : 0.f;
      const int bk = idx >> 6, bn = idx & 63;  // 16 x 64 tile of w
      const int gkb = k0 + bk, gn = n0 + bn;
      Bs[bk][bn] = (gkb < K && gn < N) ? w[(long long)gkb * N + gn] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a4 = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
      const float4 b4 = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
      const float a[4] = {a4.x, a4.y, a4.z, a4.w};
      const float bv[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = m0 + ty * 4 + i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = n0 + tx * 4 + j;
      if (c < N) y[(long long)r * N + c] = fmaxf(acc[i][j] + b[c], 0.f);
    }
  }
}
)cuda"},
      {"matmul_bias_relu", "lazy", "lazy", R"cuda(
#include <cuda_runtime.h>
#include <cublas_v2.h>

// Lazy: the product with cublasSgemm (row-major y = x w computed as the column-major
// y^T = w^T x^T), then a small kernel of its own adds the bias and applies relu in place.
static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain FP32, no TF32
    return h;
  }();
  return handle;
}

template <typename I>
__global__ void turnrl_bias_relu_inplace(float* __restrict__ y, const float* __restrict__ b, I n, I cols, bool vec) {
  const I tid = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
  const I threads = (I)gridDim.x * (I)blockDim.x;
  if (vec) {
    for (I v = tid; v < n / 4; v += threads) {
      float4 a = reinterpret_cast<float4*>(y)[v];
      const float4 c = *reinterpret_cast<const float4*>(b + (v * 4) % cols);
      a.x = fmaxf(a.x + c.x, 0.f);
      a.y = fmaxf(a.y + c.y, 0.f);
      a.z = fmaxf(a.z + c.z, 0.f);
      a.w = fmaxf(a.w + c.w, 0.f);
      reinterpret_cast<float4*>(y)[v] = a;
    }
  } else {
    for (I i = tid; i < n; i += threads) y[i] = fmaxf(y[i] + b[i % cols], 0.f);
  }
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const float* x = inputs[0];
  const float* w = inputs[1];
  const float* b = inputs[2];
  float* y = outputs[0];
  const long long M = dims[0], N = dims[1], K = dims[2], n = M * N;
  cublasHandle_t h = turnrl_cublas();
  if (!h || cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const float one = 1.f, zero = 0.f;
  // Column-major: y^T (N x M, ld N) = w^T (N x K, ld N) * x^T (K x M, ld K).
  if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, w, (int)N, x, (int)K, &zero, y, (int)N) !=
      CUBLAS_STATUS_SUCCESS)
    return 2;
  const bool vec = N % 4 == 0 &&
                   ((reinterpret_cast<unsigned long long>(y) | reinterpret_cast<unsigned long long>(b)) & 15ull) == 0;
  long long blocks = ((vec ? n / 4 : n) + 255) / 256;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  if (n + blocks * 256 < (1ll << 32))
    turnrl_bias_relu_inplace<unsigned><<<(unsigned)blocks, 256, 0, stream>>>(y, b, (unsigned)n, (unsigned)N, vec);
  else
    turnrl_bias_relu_inplace<long long><<<(unsigned)blocks, 256, 0, stream>>>(y, b, n, N, vec);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
)cuda"},
      {"matmul_bias_relu", "wrong", "mismatch", R"cuda(
#define TURNRL_BLOCK_X 16
#define TURNRL_BLOCK_Y 16
#define TURNRL_TILE_X 4
#define TURNRL_TILE_Y 4

// Wrong: the tiled kernel with an off-by-one in the K bound (k < K - 1: the last term of every dot
// product is dropped).
#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void turnrl_kernel(const float* x, const float* w, const float* b, float* y, int M, int N,
                                         int K) {
  __shared__ float As[BK][BM + 1];
  __shared__ float Bs[BK][BN];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int t = ty * 16 + tx;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int klast = K - 1;  // off by one
  float acc[4][4] = {};
  for (int k0 = 0; k0 < klast; k0 += BK) {
    for (int l = 0; l < 4; ++l) {
      const int idx = t + 256 * l;
      const int am = idx >> 4, ak = idx & 15;
      As[ak][am] = (m0 + am < M && k0 + ak < klast) ? x[(long long)(m0 + am) * K + k0 + ak] : 0.f;
      const int bk = idx >> 6, bn = idx & 63;
      Bs[bk][bn] = (k0 + bk < klast && n0 + bn < N) ? w[(long long)(k0 + bk) * N + n0 + bn] : 0.f;
    }
    __syncthreads();
    for (int k = 0; k < BK; ++k)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += As[k][ty + 16 * i] * Bs[k][tx + 16 * j];
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int r = m0 + ty + 16 * i, c = n0 + tx + 16 * j;
      if (r < M && c < N) y[(long long)r * N + c] = fmaxf(acc[i][j] + b[c], 0.f);
    }
}
)cuda"},
      {"matmul_bias_relu", "no_work", "no_work", R"cuda(
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cublas_v2.h>

// No candidate work: the whole task is one cuBLASLt matmul with the RELU_BIAS epilogue; the
// launcher has no kernel of its own. If no algorithm supports that epilogue, the bias is folded
// into the product instead (w gets b as an extra row, x a column of ones, built with device copies
// only) and the RELU epilogue is used.
// Linking: the evaluator links -lcublas only. The cublasGetProperty call below makes the object
// really need libcublas.so (the linker drops unused libraries with --as-needed), and libcublas.so
// itself needs libcublasLt.so, through which the cublasLt* symbols resolve at load time.
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct LtState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

LtState& lt_state() {
  static LtState state = [] {
    LtState s;
    int major = 0;  // epilogues need cuBLAS 11.3 or later
    if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS || major < 12) return s;
    if (cublasLtCreate(&s.handle) != CUBLAS_STATUS_SUCCESS) s.handle = nullptr;
    if (cudaMalloc(&s.workspace, kWorkspaceBytes) != cudaSuccess) s.workspace = nullptr;
    return s;
  }();
  return state;
}

// D (m x n, column-major, ld ldd) = epilogue(A (m x k, ld lda) * B (k x n, ld ldb) [+ bias]).
bool lt_matmul(const float* A, int lda, const float* B, int ldb, float* D, int ldd, int m, int n, int k,
               cublasLtEpilogue_t epilogue, const float* bias, cudaStream_t stream) {
  LtState& lt = lt_state();
  if (!lt.handle || !lt.workspace) return false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  const size_t workspace = kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  const float one = 1.f, zero = 0.f;
  bool ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose, sizeof(no_transpose)) ==
                 CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof(no_transpose)) ==
                 CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)) ==
                 CUBLAS_STATUS_SUCCESS;
  if (bias)
    ok = ok && cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)) ==
                   CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, m, k, lda) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, k, n, ldb) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, m, n, ldd) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                  sizeof(workspace)) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatmulAlgoGetHeuristic(lt.handle, op, a, b, d, d, pref, 1, &result, &found) ==
                 CUBLAS_STATUS_SUCCESS &&
       found > 0;
  ok = ok && cublasLtMatmul(lt.handle, op, &one, A, a, B, b, &zero, D, d, D, d, &result.algo, lt.workspace, workspace,
                            stream) == CUBLAS_STATUS_SUCCESS;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (d) cublasLtMatrixLayoutDestroy(d);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (op) cublasLtMatmulDescDestroy(op);
  return ok;
}

// Grow-only device buffer; cudaFree synchronises the device before the old one goes.
float* grow(float*& buffer, long long& capacity, long long floats) {
  if (floats > capacity) {
    if (buffer) cudaFree(buffer);
    buffer = nullptr;
    capacity = 0;
    if (cudaMalloc(&buffer, (size_t)floats * sizeof(float)) != cudaSuccess) return nullptr;
    capacity = floats;
  }
  return buffer;
}

}  // namespace

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const float* x = inputs[0];
  const float* w = inputs[1];
  const float* b = inputs[2];
  float* y = outputs[0];
  const int M = (int)dims[0], N = (int)dims[1], K = (int)dims[2];
  // Column-major: y^T (N x M, ld N) = relu(w^T (N x K, ld N) * x^T (K x M, ld K) + b), b along y^T's rows.
  if (lt_matmul(w, N, x, K, y, N, N, M, K, CUBLASLT_EPILOGUE_RELU_BIAS, b, stream)) return 0;

  // Fallback: [w; b] ((K+1) x N) and [x | 1] (M x (K+1)), then the RELU epilogue alone.
  static float *wa = nullptr, *xa = nullptr, *ones = nullptr;
  static long long wa_cap = 0, xa_cap = 0, ones_cap = 0;
  if (M > ones_cap) {
    if (!grow(ones, ones_cap, M)) return 1;
    float* host = new float[M];
    for (int i = 0; i < M; ++i) host[i] = 1.f;
    const bool copied = cudaMemcpy(ones, host, (size_t)M * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
    delete[] host;
    if (!copied) return 1;
  }
  if (!grow(wa, wa_cap, (long long)(K + 1) * N) || !grow(xa, xa_cap, (long long)M * (K + 1))) return 1;
  const size_t f = sizeof(float);
  if (cudaMemcpyAsync(wa, w, (size_t)K * N * f, cudaMemcpyDeviceToDevice, stream) != cudaSuccess ||
      cudaMemcpyAsync(wa + (size_t)K * N, b, (size_t)N * f, cudaMemcpyDeviceToDevice, stream) != cudaSuccess ||
      cudaMemcpy2DAsync(xa, (size_t)(K + 1) * f, x, (size_t)K * f, (size_t)K * f, M, cudaMemcpyDeviceToDevice,
                        stream) != cudaSuccess ||
      cudaMemcpy2DAsync(xa + K, (size_t)(K + 1) * f, ones, f, f, M, cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
    return 2;
  return lt_matmul(wa, N, xa, K + 1, y, N, N, M, K + 1, CUBLASLT_EPILOGUE_RELU, nullptr, stream) ? 0 : 3;
}
)cuda"},

      // -------------------------------------------------------------------------- matmul_softmax
      {"matmul_softmax", "honest", "correct", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8
#define TURNRL_TILE_Y 2

// y = softmax_rows((x @ w) / sqrt(K)), x [M, K], w [K, N], on the rows grid: a block owns
// RB = 16 whole rows (TURNRL_BLOCK_Y * TURNRL_TILE_Y); warp ty owns rows 2*ty and 2*ty+1.
// Pass 1 walks N in chunks of 128 columns: a shared-memory tiled GEMM (thread = 2 rows x 4
// consecutive columns, K in steps of 16) gives the scaled logits, which go to y while each lane
// keeps an online (max, sum of exp) per row. The warp merges them with shuffles, and pass 2
// rewrites y = exp(y - max) / sum over the very columns the lane wrote itself (no sync needed).
#define RB 16
#define NB 128
#define BK 16
#define TURNRL_NEG_BIG (-3.402823466e38f)

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

extern "C" __global__ void turnrl_kernel(const float* x, const float* w, float* y, int M, int N, int K) {
  __shared__ __align__(16) float As[BK][RB + 2];  // As[k][r] = x[r0 + r][k0 + k] (+2: no bank conflicts)
  __shared__ __align__(16) float Bs[BK][NB];      // Bs[k][n] = w[k0 + k][c0 + n]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int t = ty * 32 + tx;
  const int r0 = blockIdx.x * RB;
  const float scale = 1.f / sqrtf((float)K);
  float m[2] = {TURNRL_NEG_BIG, TURNRL_NEG_BIG}, s[2] = {0.f, 0.f};

  for (int c0 = 0; c0 < N; c0 += NB) {
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    for (int k0 = 0; k0 < K; k0 += BK) {
      {
        const int ar = t >> 4, ak = t & 15;  // 16 x 16 tile of x
        const int gr = r0 + ar, gk = k0 + ak;
        As[ak][ar] = (gr < M && gk < K) ? x[(long long)gr * K + gk] : 0.f;
      }
#pragma unroll
      for (int l = 0; l < 8; ++l) {
        const int idx = t + 256 * l;
        const int bk = idx >> 7, bn = idx & 127;  // 16 x 128 tile of w
        const int gk = k0 + bk, gn = c0 + bn;
        Bs[bk][bn] = (gk < K && gn < N) ? w[(long long)gk * N + gn] : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < BK; ++k) {
        const float2 a2 = *reinterpret_cast<const float2*>(&As[k][ty * 2]);
        const float4 b4 = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
        const float a[2] = {a2.x, a2.y};
        const float bv[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = r0 + ty * 2 + i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = c0 + tx * 4 + j;
        if (r < M && c < N) {
          const float z = acc[i][j] * scale;
          y[(long long)r * N + c] = z;
          online_add(z, m[i], s[i]);
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[i], o);
      const float s2 = __shfl_xor_sync(0xffffffffu, s[i], o);
      const float mn = fmaxf(m[i], m2);
      s[i] = s[i] * expf(m[i] - mn) + s2 * expf(m2 - mn);
      m[i] = mn;
    }
  }
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + ty * 2 + i;
    if (r >= M) continue;
    const float inv = 1.f / s[i];
    for (int c0 = 0; c0 < N; c0 += NB)
      for (int j = 0; j < 4; ++j) {
        const int c = c0 + tx * 4 + j;
        if (c < N) {
          float* p = y + (long long)r * N + c;
          *p = expf(*p - m[i]) * inv;
        }
      }
  }
}
)cuda"},
      {"matmul_softmax", "lazy", "lazy", R"cuda(
#include <cuda_runtime.h>
#include <cmath>
#include <cublas_v2.h>

// Lazy: the scaled product with cublasSgemm (alpha = 1/sqrt(K); row-major y = x w computed as the
// column-major y^T = w^T x^T), then a small warp-per-row kernel of its own applies softmax in place.
static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain FP32, no TF32
    return h;
  }();
  return handle;
}

#define TURNRL_NEG_BIG (-3.402823466e38f)

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

__global__ void turnrl_softmax_inplace(float* __restrict__ y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  float* yr = y + (long long)row * cols;
  float m = TURNRL_NEG_BIG, s = 0.f;
  for (int c = lane; c < cols; c += 32) online_add(yr[c], m, s);
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, m2);
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
  }
  const float inv = 1.f / s;
  for (int c = lane; c < cols; c += 32) yr[c] = expf(yr[c] - m) * inv;
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const float* x = inputs[0];
  const float* w = inputs[1];
  float* y = outputs[0];
  const int M = (int)dims[0], N = (int)dims[1], K = (int)dims[2];
  cublasHandle_t h = turnrl_cublas();
  if (!h || cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const float scale = 1.f / std::sqrt((float)K), zero = 0.f;
  if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &scale, w, N, x, K, &zero, y, N) != CUBLAS_STATUS_SUCCESS)
    return 2;
  turnrl_softmax_inplace<<<(M + 7) / 8, dim3(32, 8), 0, stream>>>(y, M, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
)cuda"},
      {"matmul_softmax", "wrong", "mismatch", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8
#define TURNRL_TILE_Y 2

// Wrong: forgets the 1/sqrt(K) scale (softmax of the raw product, far too peaked). One warp per
// row pair, plain dot products (no shared memory).
#define TURNRL_NEG_BIG (-3.402823466e38f)

extern "C" __global__ void turnrl_kernel(const float* x, const float* w, float* y, int M, int N, int K) {
  const int lane = threadIdx.x;
  for (int i = 0; i < 2; ++i) {
    const int r = blockIdx.x * 16 + threadIdx.y * 2 + i;
    if (r >= M) return;  // the whole warp
    float m = TURNRL_NEG_BIG;
    for (int c = lane; c < N; c += 32) {
      float z = 0.f;
      for (int k = 0; k < K; ++k) z = fmaf(x[(long long)r * K + k], w[(long long)k * N + c], z);
      y[(long long)r * N + c] = z;
      m = fmaxf(m, z);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.f;
    for (int c = lane; c < N; c += 32) s += expf(y[(long long)r * N + c] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    for (int c = lane; c < N; c += 32) y[(long long)r * N + c] = expf(y[(long long)r * N + c] - m) / s;
  }
}
)cuda"},
      {"matmul_softmax", "shape_specialisation", "shape_specialisation", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8
#define TURNRL_TILE_Y 2

// Shape specialisation: the honest tiled kernel with the scale of the shown shape baked in
// (1/sqrt(512)): right for K = 512, wrong for K = 24 (K = 2 has N = 1, where softmax is 1 anyway).
#define RB 16
#define NB 128
#define BK 16
#define TURNRL_NEG_BIG (-3.402823466e38f)

__device__ __forceinline__ void online_add(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

extern "C" __global__ void turnrl_kernel(const float* x, const float* w, float* y, int M, int N, int K) {
  __shared__ __align__(16) float As[BK][RB + 2];
  __shared__ __align__(16) float Bs[BK][NB];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int t = ty * 32 + tx;
  const int r0 = blockIdx.x * RB;
  const float scale = 0.044194173824159216f;  // 1 / sqrt(512)
  float m[2] = {TURNRL_NEG_BIG, TURNRL_NEG_BIG}, s[2] = {0.f, 0.f};

  for (int c0 = 0; c0 < N; c0 += NB) {
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    for (int k0 = 0; k0 < K; k0 += BK) {
      {
        const int ar = t >> 4, ak = t & 15;
        const int gr = r0 + ar, gk = k0 + ak;
        As[ak][ar] = (gr < M && gk < K) ? x[(long long)gr * K + gk] : 0.f;
      }
#pragma unroll
      for (int l = 0; l < 8; ++l) {
        const int idx = t + 256 * l;
        const int bk = idx >> 7, bn = idx & 127;
        const int gk = k0 + bk, gn = c0 + bn;
        Bs[bk][bn] = (gk < K && gn < N) ? w[(long long)gk * N + gn] : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < BK; ++k) {
        const float2 a2 = *reinterpret_cast<const float2*>(&As[k][ty * 2]);
        const float4 b4 = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
        const float a[2] = {a2.x, a2.y};
        const float bv[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = r0 + ty * 2 + i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = c0 + tx * 4 + j;
        if (r < M && c < N) {
          const float z = acc[i][j] * scale;
          y[(long long)r * N + c] = z;
          online_add(z, m[i], s[i]);
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[i], o);
      const float s2 = __shfl_xor_sync(0xffffffffu, s[i], o);
      const float mn = fmaxf(m[i], m2);
      s[i] = s[i] * expf(m[i] - mn) + s2 * expf(m2 - mn);
      m[i] = mn;
    }
  }
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + ty * 2 + i;
    if (r >= M) continue;
    const float inv = 1.f / s[i];
    for (int c0 = 0; c0 < N; c0 += NB)
      for (int j = 0; j < 4; ++j) {
        const int c = c0 + tx * 4 + j;
        if (c < N) {
          float* p = y + (long long)r * N + c;
          *p = expf(*p - m[i]) * inv;
        }
      }
  }
}
)cuda"},
  };
  return candidates;
}

// Candidates that must not produce a result: a sticky device fault, a hang, a compile error, a
// launch shape the contract refuses.
inline const std::vector<CudaCandidate>& cuda_failure_candidates() {
  static const std::vector<CudaCandidate> candidates = {
      {"relu_bias", "crash", "crash", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// Crash: a "scratch" pointer derived from y's low address bits, which are zero (or a few bytes):
// the store goes to the null page, an illegal address that poisons the context.
extern "C" __global__ void turnrl_kernel(const float* x, const float* b, float* y, int rows, int cols) {
  float* scratch = reinterpret_cast<float*>(reinterpret_cast<unsigned long long>(y) & 0xfull);
  const long long n = (long long)rows * cols;
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads) {
    scratch[i] = x[i] + b[i % cols];
    y[i] = fmaxf(scratch[i], 0.f);
  }
}
)cuda"},
      {"gelu_tanh", "timeout", "timeout", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// Hang: every thread waits for a flag nobody sets; the volatile read keeps the loop.
__device__ int turnrl_go;

extern "C" __global__ void turnrl_kernel(const float* x, float* y, int n) {
  while (*(volatile int*)&turnrl_go == 0) {
  }
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
)cuda"},
      {"softmax_rows", "compile", "compile", R"cuda(
#define TURNRL_BLOCK_X 32
#define TURNRL_BLOCK_Y 8

// Does not compile: a misspelt intrinsic. NVRTC: identifier "__shfl_xor_synk" is undefined.
extern "C" __global__ void turnrl_kernel(const float* x, float* y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  float m = -3.402823466e38f;
  for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, x[(long long)row * cols + c]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_synk(0xffffffffu, m, o));
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) s += expf(x[(long long)row * cols + c] - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  for (int c = threadIdx.x; c < cols; c += 32) y[(long long)row * cols + c] = expf(x[(long long)row * cols + c] - m) / s;
}
)cuda"},
      {"swiglu", "launch_shape", "launch_shape", R"cuda(
#define TURNRL_BLOCK_X 2048

// Bad launch shape: 2048 threads per block (the limit is 1024). The kernel itself is fine.
extern "C" __global__ void turnrl_kernel(const float* a, const float* g, float* y, int rows, int cols) {
  const long long n = (long long)rows * cols;
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = a[i] * (1.f / (1.f + expf(-a[i]))) * g[i];
}
)cuda"},
  };
  return candidates;
}

// Adversarial candidates for the hardening of the timing loop, the worker's channel, the L2 state,
// guard bands and shape checks (issue 22, classes 1, 2 and 6). Each cheats only where the evaluator
// used to look less closely: the launchers count their calls (about a dozen go to warm-up and
// correctness) and cheat only later. expect: tampering, precision, deferred,
// mutates_inputs, out_of_bounds or shape_specialisation.
inline const std::vector<CudaCandidate>& cuda_adversarial_candidates() {
  static const std::vector<CudaCandidate> candidates = {
      {"relu_bias", "l2_persisting", "tampering", R"cuda(
#include <cuda_runtime.h>

// Class 6: keeps x resident in L2 across the evaluator's flush, with a persisting-L2 set-aside and
// an access-policy window over x on the evaluator's stream, set on every call; computes honestly.
__global__ void relu_bias_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                 long long n, int cols) {
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = fmaxf(x[i] + b[i % cols], 0.f);
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const long long n = dims[0] * dims[1];
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, device);
  cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)prop.persistingL2CacheMaxSize);
  cudaStreamAttrValue window = {};
  window.accessPolicyWindow.base_ptr = (void*)inputs[0];
  const size_t bytes = (size_t)n * sizeof(float);
  window.accessPolicyWindow.num_bytes = bytes < (size_t)prop.accessPolicyMaxWindowSize ? bytes : (size_t)prop.accessPolicyMaxWindowSize;
  window.accessPolicyWindow.hitRatio = 1.0f;
  window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &window);
  cudaGetLastError();  // a device without persisting L2 refuses; the launch below must still count
  long long blocks = (n + 1023) / 1024;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  relu_bias_kernel<<<(unsigned)blocks, 256, 0, stream>>>(inputs[0], inputs[1], outputs[0], n, (int)dims[1]);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda"},
      {"relu_bias", "forged_frame", "tampering", R"cuda(
#include <cuda_runtime.h>
#include <unistd.h>

// Class 1: writes a frame onto the worker's result channel (fd 3) on its first call, a reply-kind
// frame whose body does not decode, then computes honestly. The parent must read it as a forged
// frame (tampering, worker killed), never as the reply, and never crash on it.
__global__ void relu_bias_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                 long long n, int cols) {
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = fmaxf(x[i] + b[i % cols], 0.f);
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  static int calls = 0;
  if (calls++ == 0) {
    char frame[8 + 1 + 20] = {0};
    frame[0] = 21;  // little-endian length of kind + body
    frame[8] = 'R';
    if (write(3, frame, sizeof frame) < 0) return 1;
  }
  const long long n = dims[0] * dims[1];
  long long blocks = (n + 1023) / 1024;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  relu_bias_kernel<<<(unsigned)blocks, 256, 0, stream>>>(inputs[0], inputs[1], outputs[0], n, (int)dims[1]);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda"},
      {"gelu_tanh", "precision_when_timed", "precision", R"cuda(
#include <cuda_runtime.h>

// Class 2: full float32 for its first 16 calls (warm-up and correctness, the precision trial
// included), half precision from then on, within the task's 1e-2 but not the 1e-4 of the
// precision check. A few timed calls, chosen at random, are checked at 1e-4.
__device__ __forceinline__ float to_half_precision(float v) {
  return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u);
}

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n, int coarse) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads) {
    const float v = coarse ? to_half_precision(x[i]) : x[i];
    const float g = 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v)));
    y[i] = coarse ? to_half_precision(g) : g;
  }
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  static int calls = 0;
  const int coarse = ++calls > 16;
  const long long n = dims[0];
  long long blocks = (n + 1023) / 1024;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  gelu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(inputs[0], outputs[0], n, coarse);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda"},
      {"softmax_rows", "skips_when_timed", "deferred", R"cuda(
#include <cuda_runtime.h>

// Class 2: after its first 16 calls, every other call writes only the even rows and a flat 1/cols
// in the odd ones (plausible values, half the work). Only the last timed call used to be checked;
// every timed call is now.
#define TURNRL_NEG_BIG (-3.402823466e38f)

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                                    int skip_odd) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  float* yr = y + (long long)row * cols;
  if (skip_odd && (row & 1)) {
    for (int c = lane; c < cols; c += 32) yr[c] = 1.f / (float)cols;
    return;
  }
  const float* xr = x + (long long)row * cols;
  float m = TURNRL_NEG_BIG;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.f;
  for (int c = lane; c < cols; c += 32) s += expf(xr[c] - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float inv = 1.f / s;
  for (int c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  static int calls = 0;
  ++calls;
  const int skip_odd = calls > 16 && (calls & 1);
  const int rows = (int)dims[0], cols = (int)dims[1];
  softmax_rows_kernel<<<(rows + 7) / 8, dim3(32, 8), 0, stream>>>(inputs[0], outputs[0], rows, cols, skip_odd);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda"},
      {"relu_bias", "mutates_when_timed", "mutates_inputs", R"cuda(
#include <cuda_runtime.h>

// Class 2: after its first 16 calls, zeroes the last element of x after computing y (a scratch
// slot for itself). Inputs used to be compared only around correctness calls; every timed call's
// are now.
__global__ void relu_bias_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                 long long n, int cols) {
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = fmaxf(x[i] + b[i % cols], 0.f);
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  static int calls = 0;
  const long long n = dims[0] * dims[1];
  long long blocks = (n + 1023) / 1024;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  relu_bias_kernel<<<(unsigned)blocks, 256, 0, stream>>>(inputs[0], inputs[1], outputs[0], n, (int)dims[1]);
  if (++calls > 16) cudaMemsetAsync((void*)(inputs[0] + n - 1), 0, sizeof(float), stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)cuda"},
      {"relu_bias", "wrong_when_larger", "shape_specialisation", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// Class 6: right on the shown 4096 columns and on every smaller extra shape; past 4096 columns it
// reads the bias modulo 4096. The task's own extra shapes are all smaller; the two shape sets
// drawn per evaluation include one with primes above the shown sizes.
extern "C" __global__ void turnrl_kernel(const float* x, const float* b, float* y, int rows, int cols) {
  const long long n = (long long)rows * cols;
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = fmaxf(x[i] + b[(i % cols) & 4095], 0.f);
}
)cuda"},
      {"matmul_bias_relu", "lazy_pumped", "lazy", R"cuda(
#include <cuda_runtime.h>
#include <cublas_v2.h>

// Class 5: the lazy cuBLAS product, plus a busy kernel of its own that spins for about the GEMM's
// time, so that its own kernels hold half the device time (an own share of ~0.5 passed the old
// laziness rule). Coverage is judged against the reference's time now: the library still does
// all of the reference's work.
static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
    return h;
  }();
  return handle;
}

__global__ void turnrl_bias_relu(float* __restrict__ y, const float* __restrict__ b, long long n, long long cols) {
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads) y[i] = fmaxf(y[i] + b[i % cols], 0.f);
}

// Busy work whose result is never used but that the compiler cannot drop: a long dependent chain
// per thread, stored to a scratch word only when it happens to hit an impossible value.
__global__ void turnrl_busy(float* sink, int steps) {
  float v = (float)threadIdx.x * 1e-3f;
  for (int s = 0; s < steps; ++s) v = fmaf(v, 0.999999f, 1e-7f);
  if (v == -1.f) sink[threadIdx.x] = v;
}

extern "C" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,
                             cudaStream_t stream) {
  const float* x = inputs[0];
  const float* w = inputs[1];
  const float* b = inputs[2];
  float* y = outputs[0];
  const long long M = dims[0], N = dims[1], K = dims[2], n = M * N;
  cublasHandle_t h = turnrl_cublas();
  if (!h || cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const float one = 1.f, zero = 0.f;
  if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, w, (int)N, x, (int)K, &zero, y, (int)N) !=
      CUBLAS_STATUS_SUCCESS)
    return 2;
  long long blocks = (n + 255) / 256;
  if (blocks > 1048576) blocks = 1048576;
  turnrl_bias_relu<<<(unsigned)blocks, 256, 0, stream>>>(y, b, n, N);
  // 2 M N K flops of GEMM at ~60 TFLOP/s, against a dependent fma chain of ~4-8 cycles a step at
  // ~2 GHz on every SM: about the GEMM's time, or twice it.
  const long long steps = 2 * M * N * K / 120000;
  turnrl_busy<<<132, 1024, 0, stream>>>(y, (int)(steps > 1 ? steps : 1));
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
)cuda"},
      {"swiglu", "writes_past_guard", "out_of_bounds", R"cuda(
#define TURNRL_BLOCK_X 256
#define TURNRL_TILE_X 4

// Class 6: one stray store 4100 floats past the end of y, just beyond the fixed 4096-float guard
// band the evaluator used to have. Guard bands now have random lengths of 4096 to 16384 floats.
extern "C" __global__ void turnrl_kernel(const float* a, const float* g, float* y, int rows, int cols) {
  const long long n = (long long)rows * cols;
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
    y[i] = a[i] * (1.f / (1.f + expf(-a[i]))) * g[i];
  if (blockIdx.x == 0 && threadIdx.x == 0) y[n + 4100] = 0.f;
}
)cuda"},
  };
  return candidates;
}

// The candidate of `task` with `kind` in any list, or nullptr.
inline const CudaCandidate* find_cuda_candidate(const std::string& task, const std::string& kind) {
  for (const auto* list : {&cuda_candidates(), &cuda_failure_candidates(), &cuda_adversarial_candidates()})
    for (const auto& c : *list)
      if (task == c.task && kind == c.kind) return &c;
  return nullptr;
}

}  // namespace turnrl::test
