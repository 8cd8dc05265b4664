// decode_linear (decode_gemm.cuh): a skinny GEMM for the decode step's projections on Hopper.
//
// A block computes 64 rows (all of x; rows past the last are zeros) by `Cols` outputs over its
// split's share of the inputs, in steps of 64 inputs: each step's weight tile [Cols, 64] and
// activation tile [64, 64] come into shared memory by cp.async, some steps ahead, and four
// warps multiply them with mma.sync (m16n8k16, float32 accumulators), each warp a quarter of the
// columns. Shared tiles are rows of 128 bytes with their eight 16-byte chunks XOR-swizzled by
// the row, so that ldmatrix reads eight rows without bank conflicts.
//
// Before it waits for the kernel ahead (a programmatic dependent launch), a block already issues
// the loads of its first weight tiles: weights are not that kernel's output, and at these sizes the
// time of a projection is mostly the time its weights take to arrive.
//
// The `splits` blocks of the same outputs form a thread-block cluster. Each leaves its float32
// partial tile in its shared memory; after the cluster's barrier each block sums a share of the
// outputs over the cluster's partials, in rank order (so the result does not depend on which
// block finished first), adds the bias, rounds once and stores.
#include "decode_gemm.cuh"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "dependent_launch.cuh"

namespace turnrl::decoder_kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kRows = 64;      // rows a block computes: the most decode_linear takes
constexpr int kDepth = 64;     // inputs a pipeline step
// Pipeline steps in shared memory by default (128 KB at 64 columns, 192 KB at 128: one block a
// SM). A split is mostly 4 to 12 steps, so nearly all of a block's weights are requested at once:
// at this size what bounds a projection is the bytes in flight a SM. 4 and 6 steps are there for
// engine_bench's sweep.
constexpr int kDefaultStages = 8;
constexpr int kThreads = 128;  // four warps
constexpr int kMaxSplits = 8;  // the portable cluster size

template <int Cols, int Stages>
struct Layout {
  static constexpr int kWeightBytes = Cols * kDepth * 2;
  static constexpr int kInputBytes = kRows * kDepth * 2;
  static constexpr int kStageBytes = kWeightBytes + kInputBytes;
  static constexpr int kPartialStride = Cols + 4;  // floats a partial row: 16-byte aligned, rows on other banks
  static constexpr int kPartialBytes = kRows * kPartialStride * 4;
  static constexpr int kSharedBytes = std::max(Stages * kStageBytes, kPartialBytes);
};

// The device code needs compute capability 9.0 (clusters); older targets compile an empty kernel.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

// Byte offset of 16-byte chunk `chunk` (0-7) of row `row` in a tile of 128-byte rows.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return uint32_t(row) * 128u + (uint32_t(chunk ^ (row & 7)) << 4);
}

__device__ __forceinline__ void copy16_async(uint32_t to, const void* from, int bytes) {
  // bytes 0: the 16 bytes are zero-filled and nothing is read.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(bytes));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

__device__ __forceinline__ void load_matrices(uint32_t address, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                              uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(address));
}

// d += a b for one m16n8k16 tile: a row-major 16 x 16, b column-major 16 x 8, float32 d.
template <typename T>
__device__ __forceinline__ void multiply_add(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void multiply_add<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                            uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void multiply_add<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                     uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// Four outputs, rounded once to the dtype, as one 8-byte store.
__device__ __forceinline__ void store4(__nv_bfloat16* out, float4 v) {
  __nv_bfloat162 pair[2] = {__floats2bfloat162_rn(v.x, v.y), __floats2bfloat162_rn(v.z, v.w)};
  *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(pair);
}
__device__ __forceinline__ void store4(__half* out, float4 v) {
  __half2 pair[2] = {__floats2half2_rn(v.x, v.y), __floats2half2_rn(v.z, v.w)};
  *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(pair);
}

#endif

// grid (splits, out_features / Cols), clusters of `splits` blocks along x; `steps`: the pipeline
// steps of a split (in_features / 64 / splits).
template <typename T, int Cols, int kStages>
__global__ void __launch_bounds__(kThreads) decode_linear_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                                                 const T* __restrict__ bias, T* __restrict__ out,
                                                                 int rows, int out_features, int in_features,
                                                                 int steps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using L = Layout<Cols, kStages>;
  constexpr int kTiles = Cols / 32;  // n8 tiles a warp
  extern __shared__ __align__(128) unsigned char shared[];
  const int split = blockIdx.x, splits = gridDim.x;
  const int first_col = blockIdx.y * Cols;
  const int first_input = split * steps * kDepth;
  const int thread = threadIdx.x, lane = thread & 31, warp = thread >> 5;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(shared));

  const auto load_weights = [&](int stage, int step) {
    const uint32_t to = base + stage * L::kStageBytes;
    const T* from = weight + int64_t(first_col) * in_features + first_input + step * kDepth;
#pragma unroll
    for (int i = 0; i < Cols * 8 / kThreads; ++i) {
      const int c = thread + i * kThreads, row = c >> 3, chunk = c & 7;
      copy16_async(to + swizzled(row, chunk), from + int64_t(row) * in_features + chunk * 8, 16);
    }
  };
  const auto load_inputs = [&](int stage, int step) {
    const uint32_t to = base + stage * L::kStageBytes + L::kWeightBytes;
    const T* from = x + first_input + step * kDepth;
#pragma unroll
    for (int i = 0; i < kRows * 8 / kThreads; ++i) {
      const int c = thread + i * kThreads, row = c >> 3, chunk = c & 7;
      const bool real = row < rows;
      copy16_async(to + swizzled(row, chunk), real ? from + int64_t(row) * in_features + chunk * 8 : x,
                   real ? 16 : 0);
    }
  };

  // The first steps' weights are on their way before the kernel ahead has finished; the inputs
  // are its output. Commit groups: group s holds step s's inputs (group 0 also the weights of
  // steps 0 to kStages - 2), so waiting for group s is waiting for step s.
  for (int s = 0; s < kStages - 1; ++s)
    if (s < steps) load_weights(s, s);
  start_after_previous_grid();
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_inputs(s, s);
    commit_copies();
  }

  float acc[4][kTiles][4];
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int n = 0; n < kTiles; ++n)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[m][n][r] = 0.f;
  const int row_tiles = (rows + 15) / 16;

  for (int step = 0; step < steps; ++step) {
    wait_copies<kStages - 2>();
    __syncthreads();  // step's tiles are in; every warp is done with the stage refilled next
    const int ahead = step + kStages - 1;
    if (ahead < steps) {
      load_weights(ahead % kStages, ahead);
      load_inputs(ahead % kStages, ahead);
    }
    commit_copies();
    const uint32_t weights = base + (step % kStages) * L::kStageBytes, inputs = weights + L::kWeightBytes;
#pragma unroll
    for (int k = 0; k < kDepth / 16; ++k) {
      uint32_t b[kTiles][2];
#pragma unroll
      for (int p = 0; p < kTiles / 2; ++p) {
        // Matrices: (cols 0-7, inputs 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) of the pair.
        const int col = warp * (Cols / 4) + p * 16 + (lane >> 4) * 8 + (lane & 7);
        load_matrices(weights + swizzled(col, k * 2 + ((lane >> 3) & 1)), b[2 * p][0], b[2 * p][1], b[2 * p + 1][0],
                      b[2 * p + 1][1]);
      }
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        if (m < row_tiles) {
          uint32_t a[4];
          // Matrices: (rows 0-7, inputs 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
          load_matrices(inputs + swizzled(m * 16 + (lane & 15), k * 2 + (lane >> 4)), a[0], a[1], a[2], a[3]);
#pragma unroll
          for (int n = 0; n < kTiles; ++n) multiply_add<T>(acc[m][n], a, b[n][0], b[n][1]);
        }
      }
    }
  }
  wait_copies<0>();
  __syncthreads();  // the pipeline's memory becomes the partial tile

  float* partial = reinterpret_cast<float*>(shared);
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    if (m < row_tiles) {
#pragma unroll
      for (int n = 0; n < kTiles; ++n) {
        const int row = m * 16 + (lane >> 2), col = warp * (Cols / 4) + n * 8 + 2 * (lane & 3);
        *reinterpret_cast<float2*>(partial + row * L::kPartialStride + col) = make_float2(acc[m][n][0], acc[m][n][1]);
        *reinterpret_cast<float2*>(partial + (row + 8) * L::kPartialStride + col) =
            make_float2(acc[m][n][2], acc[m][n][3]);
      }
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  if (splits > 1) cluster.sync();
  else __syncthreads();

  // This block's share of the outputs, four at a time, summed over the cluster in rank order.
  constexpr int kQuads = Cols / 4;
  for (int e = split * kThreads + thread; e < rows * kQuads; e += splits * kThreads) {
    const int row = e / kQuads, col = (e % kQuads) * 4;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int rank = 0; rank < splits; ++rank) {
      const float* from = splits > 1 ? cluster.map_shared_rank(partial, rank) : partial;
      const float4 v = *reinterpret_cast<const float4*>(from + row * L::kPartialStride + col);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    if (bias) {
      sum.x += to_float(bias[first_col + col]);
      sum.y += to_float(bias[first_col + col + 1]);
      sum.z += to_float(bias[first_col + col + 2]);
      sum.w += to_float(bias[first_col + col + 3]);
    }
    store4(out + int64_t(row) * out_features + first_col + col, sum);
  }
  if (splits > 1) cluster.sync();  // no block leaves while another still reads its partial
#endif
}

template <typename T, int Cols, int Stages>
cudaError_t launch(const void* x, const void* weight, const void* bias, void* out, int rows, int out_features,
                   int in_features, int splits, cudaStream_t stream) {
  const auto kernel = decode_linear_kernel<T, Cols, Stages>;
  constexpr int kShared = Layout<Cols, Stages>::kSharedBytes;
  // Above 48 KB of dynamic shared memory a kernel must ask for it, once a device.
  constexpr int kDevices = 64;
  static std::atomic<bool> asked[kDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return cudaErrorInvalidDevice;
  if (!asked[device].load()) {
    const cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
    if (status != cudaSuccess) return status;
    asked[device] = true;
  }
  const int steps = in_features / kDepth / splits;
  return launch_dependent_cluster(kernel, dim3(splits, out_features / Cols), dim3(kThreads), kShared, stream,
                                  unsigned(splits), static_cast<const T*>(x), static_cast<const T*>(weight),
                                  static_cast<const T*>(bias), static_cast<T*>(out), rows, out_features, in_features,
                                  steps);
}

std::atomic<bool> decode_gemm_on{false};  // decode_gemm.cuh: not yet faster than cuBLAS

}  // namespace

void set_decode_gemm(bool on) { decode_gemm_on = on; }
bool decode_gemm_enabled() { return decode_gemm_on; }

DecodeGemmTiling decode_gemm_tiling(int64_t out_features, int64_t in_features, int sm_count) {
  DecodeGemmTiling best;
  if (in_features <= 0 || in_features % kDepth != 0 || out_features <= 0 || sm_count < 1) return best;
  const int64_t depth_steps = in_features / kDepth;
  int64_t best_bytes = 0;
  for (const int cols : {128, 64}) {
    if (out_features % cols != 0) continue;
    for (int splits = 1; splits <= kMaxSplits; splits *= 2) {
      if (depth_steps % splits != 0) continue;
      // Blocks spread evenly over the SMs: the busiest SM reads ceil(blocks / SMs) blocks'
      // weights. Among equals, fewer splits (less to sum) win, then wider blocks.
      const int64_t blocks = out_features / cols * splits;
      const int64_t busiest = (blocks + sm_count - 1) / sm_count * cols * (depth_steps / splits);
      if (best.cols == 0 || busiest < best_bytes || (busiest == best_bytes && splits < best.splits)) {
        best = {cols, splits, kDefaultStages};
        best_bytes = busiest;
      }
    }
  }
  return best;
}

bool decode_linear_supported(DType dtype, int64_t rows, int64_t out_features, int64_t in_features) {
#if CUDART_VERSION < 12030
  return false;
#else
  if (!decode_gemm_enabled() || (dtype != DType::f16 && dtype != DType::bf16)) return false;
  if (rows < 1 || rows > kRows || in_features % kDepth != 0 || out_features % 64 != 0) return false;
  if (in_features <= 0 || out_features <= 0 || in_features > (1 << 30) || out_features / 64 > 65535) return false;
  int major = 0, sm_count = 0;
  return current_device(major, sm_count) && major >= 9;
#endif
}

cudaError_t decode_linear(DType dtype, const void* x, const void* weight, const void* bias, void* out, int64_t rows,
                          int64_t out_features, int64_t in_features, DecodeGemmTiling tiling, cudaStream_t stream) {
  if (!decode_linear_supported(dtype, rows, out_features, in_features)) return cudaErrorInvalidValue;
  if (!aligned16({x, weight, out}) || (bias && reinterpret_cast<uintptr_t>(bias) % 2))
    return cudaErrorInvalidValue;
  if (tiling.cols == 0) {
    int major = 0, sm_count = 0;
    if (!current_device(major, sm_count)) return cudaErrorInvalidDevice;
    tiling = decode_gemm_tiling(out_features, in_features, sm_count);
  }
  if (tiling.stages == 0) tiling.stages = kDefaultStages;
  const int64_t depth_steps = in_features / kDepth;
  const bool stages_ok = tiling.stages == 4 || tiling.stages == 6 || tiling.stages == 8;
  if ((tiling.cols != 64 && tiling.cols != 128) || !stages_ok || out_features % tiling.cols != 0 || tiling.splits < 1 ||
      tiling.splits > kMaxSplits || (tiling.splits & (tiling.splits - 1)) != 0 || depth_steps % tiling.splits != 0)
    return cudaErrorInvalidValue;
  const int r = int(rows), n = int(out_features), k = int(in_features), s = tiling.splits;
  const auto typed = [&](auto zero) {
    using T = decltype(zero);
    const auto with_stages = [&](auto cols) -> cudaError_t {
      constexpr int C = decltype(cols)::value;
      switch (tiling.stages) {
        case 4: return launch<T, C, 4>(x, weight, bias, out, r, n, k, s, stream);
        case 6: return launch<T, C, 6>(x, weight, bias, out, r, n, k, s, stream);
        case 8: return launch<T, C, 8>(x, weight, bias, out, r, n, k, s, stream);
      }
      return cudaErrorInvalidValue;
    };
    return tiling.cols == 128 ? with_stages(std::integral_constant<int, 128>())
                              : with_stages(std::integral_constant<int, 64>());
  };
  return dtype == DType::bf16 ? typed(__nv_bfloat16()) : typed(__half());
}

}  // namespace turnrl::decoder_kernels
