#include "decode_attention.cuh"
#include "dependent_launch.cuh"
#include "head_rotary.cuh"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

namespace turnrl::decoder_kernels {
namespace {

constexpr int kThreads = 128;  // 4 warps a block
constexpr int kWarps = kThreads / 32;
constexpr int kMaxSplits = 16;
// Query heads a key/value head, one template each: 2 for Qwen3-0.6B/1.7B, 4 for Qwen3-8B and
// Llama-3.2-1B, 6 and 7 for Qwen2.5-1.5B/0.5B/7B. A thread keeps 16 G floats of query and
// accumulator: 8 is about the most that fits without spills.
constexpr int kMaxGroups = 8;
constexpr int kKeysPerSplit = 64;  // the least share of a row's keys worth a block of its own
constexpr int kKeysASplit = 640;   // decode_attention_splits(): about this many keys a split
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

// Two values of a 32-bit word (the lower half first) as float32.
template <typename T>
__device__ __forceinline__ float2 pair_to_float2(uint32_t bits);
template <>
__device__ __forceinline__ float2 pair_to_float2<__half>(uint32_t bits) {
  __half2 pair;
  memcpy(&pair, &bits, sizeof pair);
  return __half22float2(pair);
}
template <>
__device__ __forceinline__ float2 pair_to_float2<__nv_bfloat16>(uint32_t bits) {
  return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
}

// The 8 values of a 16-byte pack as float32.
template <typename T>
__device__ __forceinline__ void unpack(const uint4& pack, float (&x)[8]) {
  const uint32_t words[4] = {pack.x, pack.y, pack.z, pack.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 pair = pair_to_float2<T>(words[w]);
    x[2 * w] = pair.x;
    x[2 * w + 1] = pair.y;
  }
}

// The 8 e4m3 codes of an 8-byte pack (fp8_e4m3.h) as float32: exact, by the hardware's conversion.
__device__ __forceinline__ void unpack_e4m3(const uint2& pack, float (&x)[8]) {
  const uint32_t words[2] = {pack.x, pack.y};
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw raw =
          __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t((words[w] >> (16 * h)) & 0xffffu), __NV_E4M3);
      __half2 pair;
      memcpy(&pair, &raw, sizeof pair);
      const float2 f = __half22float2(pair);
      x[4 * w + 2 * h] = f.x;
      x[4 * w + 2 * h + 1] = f.y;
    }
  }
}

// 8 consecutive cache elements: one 16-byte load of T, or an 8-byte load of codes.
template <typename C>
using CachePack = std::conditional_t<std::is_same_v<C, uint8_t>, uint2, uint4>;

template <typename T, typename C>
__device__ __forceinline__ void unpack_cache(const CachePack<C>& pack, float (&x)[8]) {
  if constexpr (std::is_same_v<C, uint8_t>) unpack_e4m3(pack, x);
  else unpack<T>(pack, x);
}

__device__ __forceinline__ void store(__half* to, float v) { *to = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* to, float v) { *to = __float2bfloat16_rn(v); }

// The factor that moves a partial softmax kept against its running max m to the common max
// m_all >= m: 2^(m - m_all), and 0 for an empty one (m = -inf), where the plain formula gives
// 2^(-inf + inf) = NaN when every part is empty.
__device__ __forceinline__ float rescale(float m, float m_all) { return m == -INFINITY ? 0.0f : exp2f(m - m_all); }

// Where query head i of key/value head j of a row lies among its heads: h = j * groups + i, or
// i * kv_heads + j in group-major order.
__device__ __forceinline__ int head_place(int i, int j, int groups, int kv_heads, bool group_major) {
  return group_major ? i * kv_heads + j : j * groups + i;
}

// The block's share [lo, hi) of a row's `used` keys: split blockIdx.z of gridDim.z; the last
// splits may get fewer or none.
__device__ __forceinline__ void split_range(int used, int& lo, int& hi) {
  const int chunk = (used + int(gridDim.z) - 1) / int(gridDim.z);
  lo = min(used, int(blockIdx.z) * chunk);
  hi = min(used, lo + chunk);
}

// The partial softmaxes of a block's warps (acc against max, and sum, for its G query heads) into
// the block's result, one output value a thread at a time: the normalised output with one split,
// else the block's unnormalised partial (acc, max, sum) for merge_splits. Grid (j, row, split).
template <typename T, int D, int G>
__device__ __forceinline__ void write_block_result(const float (&shared_acc)[kWarps][G][D],
                                                   const float (&shared_max)[kWarps][G],
                                                   const float (&shared_sum)[kWarps][G], T* __restrict__ out,
                                                   float* __restrict__ workspace, int row, int j, int heads,
                                                   int kv_heads, bool group_major) {
  const int split = blockIdx.z, splits = gridDim.z, rows = gridDim.y;
  for (int at = threadIdx.x; at < G * D; at += kThreads) {
    const int i = at / D, d = at % D;
    float block_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, shared_max[w][i]);
    float block_sum = 0.0f, block_acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float factor = rescale(shared_max[w][i], block_max);
      block_sum += shared_sum[w][i] * factor;
      block_acc += shared_acc[w][i][d] * factor;
    }
    const int64_t output = int64_t(row) * heads + head_place(i, j, G, kv_heads, group_major);
    if (splits == 1) {
      store(out + output * D + d, block_sum > 0.0f ? block_acc / block_sum : 0.0f);
    } else {
      // Partials [splits][rows * heads][D], then maxima and sums [splits][rows * heads].
      const int64_t outputs = int64_t(rows) * heads, partial = int64_t(split) * outputs + output;
      workspace[partial * D + d] = block_acc;
      if (d == 0) {
        workspace[int64_t(splits) * outputs * D + partial] = block_max;
        workspace[int64_t(splits) * outputs * (D + 1) + partial] = block_sum;
      }
    }
  }
}

// The step's own q, k and v (decode_attention_from_qkv), typed; qkv null: q holds the queries and
// the caches the new keys and values.
template <typename T, typename C>
struct FreshArgs {
  const T* qkv;
  const T *q_weight, *k_weight, *cos, *sin;
  const int64_t* write_index;
  C *keys, *values;
  float eps;
};

// One block per (key/value head j, row b, split s); G = groups query heads share the head's keys.
// A lane holds 8 consecutive values of a key (one 16-byte load): a key takes D / 8 lanes, and each
// such lane group is its own online-softmax stream over keys lo + t, lo + t + streams, ... of the
// split's range [lo, hi) (t: the stream's index in the block). Scores are kept in base 2 (q
// scaled by scale * log2(e), exp2f). A stream's next keys' K and V are loaded before the current
// key's math (kDepth of them in flight). At the end the streams merge, a warp's by shuffles,
// the warps through shared memory; with one split the block writes the normalised output, else
// its unnormalised partial (acc, max, sum) for merge_splits.
// With fresh.qkv the block first makes its G queries from the merged projection's row (RMS norm +
// rotary, as qkv_rotary_store makes them: the same device function, the same bits) into shared
// memory. The block whose split holds the row's new key (at cache row write_index[b]; split 0
// where that row is not among the row's keys: an idle row's scratch write) also makes that key and
// value, writes them to the caches and reads them from shared memory in place of the cache: no
// block reads a cache row written in this launch.
// C: the cache's element, T or uint8_t (e4m3 codes, read 8 bytes a lane: twice the keys in flight).
template <typename T, typename C, int D, int G>
__global__ void __launch_bounds__(kThreads)
    decode_attention_blocks(const T* __restrict__ q, const C* __restrict__ keys, const C* __restrict__ values,
                            const int32_t* __restrict__ key_offsets, const int32_t* __restrict__ keys_used,
                            T* __restrict__ out, float* __restrict__ workspace, int heads, int kv_heads,
                            bool group_major, float scale, FreshArgs<T, C> fresh) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  constexpr int kLanes = D / 8;                  // lanes that hold one key
  constexpr int kWarpStreams = 32 / kLanes;      // keys a warp reads at a time
  constexpr int kStreams = kWarps * kWarpStreams;
  static_assert(D % 8 == 0 && 32 % kLanes == 0, "a key spans 1, 2, 4, 8, 16 or 32 lanes");
  __shared__ __align__(16) float shared_acc[kWarps][G][D];
  __shared__ float shared_max[kWarps][G], shared_sum[kWarps][G];
  __shared__ __align__(16) T fresh_q[G][D];
  __shared__ __align__(16) C fresh_kv[2][D];  // the new key and value, as the cache holds them

  const int j = blockIdx.x, row = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int part = lane % kLanes;  // values part * 8 .. part * 8 + 7 of each key
  const int warp_stream = lane / kLanes;

  const int used = max(keys_used[row], 0);
  int lo, hi;
  split_range(used, lo, hi);

  int fresh_key = -1;  // the key taken from fresh_kv, not from the cache
  if (fresh.qkv != nullptr) {
    constexpr int J = D / 64;  // pairs a lane in warp_norm_rotate
    static_assert(D % 64 == 0, "the warp-per-head norm + rotary takes head_dim 64, 128 or 256");
    const int64_t target = fresh.write_index[row];
    const int64_t at = target - key_offsets[row];  // the new key's place among the row's keys
    const bool in_row = at >= 0 && at < used;
    const bool writes = in_row ? at >= lo && at < hi : split == 0;
    if (in_row && writes) fresh_key = int(at);
    const T* x = fresh.qkv + int64_t(row) * (heads + 2 * kv_heads) * D;
    const T* cos = fresh.cos + int64_t(row) * (D / 2);
    const T* sin = fresh.sin + int64_t(row) * (D / 2);
    // Tasks, one a warp at a time: the G query heads j G .. j G + G - 1, then (writer only) key head j
    // and value head j.
    for (int task = warp; task < G + (writes ? 2 : 0); task += kWarps) {
      if (task == G + 1) {
        const T* from = x + int64_t(heads + kv_heads + j) * D;
        C* to = fresh.values + (target * kv_heads + j) * D;
        for (int v = lane; v < D; v += 32) to[v] = fresh_kv[1][v] = device::to_cache<T, C>(device::to_float(from[v]));
        continue;
      }
      const bool query_head = task < G;
      float a[J], b[J], c[J], s[J];
      device::load_head_pairs<T, J>(x + int64_t(query_head ? j * G + task : heads + j) * D, cos, sin, lane, a, b, c, s);
      device::warp_norm_rotate<T, J>(a, b, c, s, query_head ? fresh.q_weight : fresh.k_weight, lane, fresh.eps, nullptr);
      if (query_head) {
        device::store_head_pairs<T, J>(fresh_q[task], lane, a, b);
        continue;
      }
      // The key as qkv_rotary_store stores it: rounded to T, then (codes) to e4m3.
      device::store_head_pairs<T, J, C>(fresh_kv[0], lane, a, b);
      device::store_head_pairs<T, J, C>(fresh.keys + (target * kv_heads + j) * D, lane, a, b);
    }
    __syncthreads();
  }

  float query[G][8];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const int place = head_place(i, j, G, kv_heads, group_major);
    unpack<T>(fresh.qkv != nullptr
                  ? *reinterpret_cast<const uint4*>(&fresh_q[i][part * 8])
                  : __ldg(reinterpret_cast<const uint4*>(q + (int64_t(row) * heads + place) * D + part * 8)),
              query[i]);
#pragma unroll
    for (int v = 0; v < 8; ++v) query[i][v] *= scale * kLog2e;
  }
  float max_score[G], sum[G], acc[G][8];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    max_score[i] = -INFINITY;
    sum[i] = 0.0f;
#pragma unroll
    for (int v = 0; v < 8; ++v) acc[i][v] = 0.0f;
  }

  const int64_t key_stride = int64_t(kv_heads) * D;  // from one key of head j to the next
  const int64_t first = (int64_t(key_offsets[row]) * kv_heads + j) * D + part * 8;
  const C* key_base = keys + first;
  const C* value_base = values + first;
  // kind 0: a key, 1: a value.
  using Pack = CachePack<C>;
  const auto load = [&](int kind, int key) {
    if (key == fresh_key) return *reinterpret_cast<const Pack*>(&fresh_kv[kind][part * 8]);
    return __ldg(reinterpret_cast<const Pack*>((kind == 0 ? key_base : value_base) + int64_t(key) * key_stride));
  };
  // Each stream keeps its next kDepth keys' K and V loads in flight (a ring in registers, refilled
  // as a key is used): at B = 64 a SM holds about four blocks, and with one key ahead a stream they
  // kept too few bytes in flight to reach the copy bandwidth on short rows.
  // The loop runs alike in every lane of a warp (its bound is the warp's first key), so that the
  // shuffles see all 32 lanes; a stream past the range's end computes a score it does not use.
  // Each stream takes its keys in the same order at any depth, so the sums are the same bits.
  constexpr int kDepth = (G <= 4 ? 4 : 2) * int(sizeof(uint4) / sizeof(Pack));
  Pack key_ring[kDepth], value_ring[kDepth];
  const int first_key = lo + warp * kWarpStreams + warp_stream;
#pragma unroll
  for (int s = 0; s < kDepth; ++s) {
    const int key = first_key + s * kStreams;
    key_ring[s] = value_ring[s] = Pack{};
    if (key < hi) {
      key_ring[s] = load(0, key);
      value_ring[s] = load(1, key);
    }
  }
  for (int warp_first = lo + warp * kWarpStreams; warp_first < hi; warp_first += kDepth * kStreams) {
#pragma unroll
    for (int s = 0; s < kDepth; ++s) {
      const int round_first = warp_first + s * kStreams;
      if (round_first >= hi) break;  // alike in the warp
      const int key = round_first + warp_stream;
      const bool valid = key < hi;
      const Pack key_pack = key_ring[s], value_pack = value_ring[s];
      const int ahead = key + kDepth * kStreams;
      if (ahead < hi) {
        key_ring[s] = load(0, ahead);
        value_ring[s] = load(1, ahead);
      }
      float k[8];
      unpack_cache<T, C>(key_pack, k);
      float score[G];
#pragma unroll
      for (int i = 0; i < G; ++i) {
        score[i] = 0.0f;
#pragma unroll
        for (int v = 0; v < 8; ++v) score[i] = fmaf(query[i][v], k[v], score[i]);
      }
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset >>= 1)
#pragma unroll
        for (int i = 0; i < G; ++i) score[i] += __shfl_xor_sync(kFullMask, score[i], offset);
      if (valid) {
        float value[8];
        unpack_cache<T, C>(value_pack, value);
#pragma unroll
        for (int i = 0; i < G; ++i) {
          // One exp2f a key: either the key raises the max (the old terms scale by 2^-diff, the
          // key weighs 1) or it does not (the key weighs 2^diff). diff is +inf at the first key:
          // the empty old terms scale by 0.
          const float diff = score[i] - max_score[i];
          const float e = exp2f(-fabsf(diff));
          const bool raises = diff > 0.0f;
          const float old_scale = raises ? e : 1.0f, p = raises ? 1.0f : e;
          max_score[i] = raises ? score[i] : max_score[i];
          sum[i] = fmaf(sum[i], old_scale, p);
#pragma unroll
          for (int v = 0; v < 8; ++v) acc[i][v] = fmaf(acc[i][v], old_scale, p * value[v]);
        }
      }
    }
  }

  // The warp's streams into one: lane groups kLanes, 2 kLanes, ... apart hold the same values of
  // different streams.
#pragma unroll
  for (int offset = kLanes; offset < 32; offset <<= 1) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
      const float other_max = __shfl_xor_sync(kFullMask, max_score[i], offset);
      const float other_sum = __shfl_xor_sync(kFullMask, sum[i], offset);
      const float new_max = fmaxf(max_score[i], other_max);
      const float mine = rescale(max_score[i], new_max), theirs = rescale(other_max, new_max);
      sum[i] = sum[i] * mine + other_sum * theirs;
#pragma unroll
      for (int v = 0; v < 8; ++v) acc[i][v] = acc[i][v] * mine + __shfl_xor_sync(kFullMask, acc[i][v], offset) * theirs;
      max_score[i] = new_max;
    }
  }
  if (warp_stream == 0) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
      float4* to = reinterpret_cast<float4*>(&shared_acc[warp][i][part * 8]);
      to[0] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
      to[1] = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
      if (part == 0) {
        shared_max[warp][i] = max_score[i];
        shared_sum[warp][i] = sum[i];
      }
    }
  }
  __syncthreads();

  write_block_result<T, D, G>(shared_acc, shared_max, shared_sum, out, workspace, row, j, heads, kv_heads, group_major);
}

// ---- The tensor-core variant (decode_attention_tensor_cores()) ----
//
// The scalar kernel above spends some sixty warp instructions a key (unpacking, a dot product
// reduced across 16 lanes by shuffles, the online softmax, the weighted sum, each in float32 FMAs):
// over e4m3 codes, half the bytes a key, it stops being held back by memory. Here a warp takes 16
// keys at a time and does both products on the tensor cores (mma.m16n8k16, float32 accumulators),
// FlashAttention-2's register layout with the G query heads as the rows of a 16-row tile (rows G..15
// zero): S = Q K^T for 2 x 8 keys, one online-softmax update a tile, O += P V. About a fifth of
// the instructions a key. P is rounded to the mma's 16-bit type for the second product, as
// FlashAttention rounds it; the sums are float32.
//
// The mma's element: T's own for a cache of T, float16 for e4m3 codes (each code is a float16
// value exactly; the hardware converts two codes in one instruction). q in T converts to float16
// exactly for magnitudes in float16's normal range (bfloat16 has fewer mantissa bits); it is
// clamped to +-65504, and magnitudes below 2^-14 keep fewer bits (a negligible share of a score).
template <typename T, typename C>
using MmaElement = std::conditional_t<std::is_same_v<C, uint8_t>, __half, T>;

// Blocks a SM that the registers must allow: over e4m3 codes 4 (128 registers a thread, a few
// spilled at head_dim 128), so that at B = 64 the 512 blocks of Qwen3's attention fit one wave of a
// 132-SM GPU; over keys in T 3 (twice the bytes a tile in registers; no spills).
template <typename C>
constexpr int kTensorCoreBlocksAnSm = std::is_same_v<C, uint8_t> ? 4 : 3;

// (lo, hi) rounded to E, as the 32-bit pair an mma operand register holds (lo in the low half).
template <typename E>
__device__ __forceinline__ uint32_t pair_bits(float lo, float hi) {
  uint32_t bits;
  if constexpr (std::is_same_v<E, __half>) {
    const __half2 pair = __floats2half2_rn(lo, hi);
    memcpy(&bits, &pair, sizeof bits);
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    memcpy(&bits, &pair, sizeof bits);
  }
  return bits;
}

// Four e4m3 codes (byte 0 first) as two float16 pairs: codes 0, 1 in `low`, codes 2, 3 in `high`.
__device__ __forceinline__ void e4m3x4_to_half_pairs(uint32_t codes, uint32_t& low, uint32_t& high) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n cvt.rn.f16x2.e4m3x2 %1, hi;\n}"
      : "=r"(low), "=r"(high)
      : "r"(codes));
#else
  const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(codes & 0xffffu), __NV_E4M3);
  const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(codes >> 16), __NV_E4M3);
  low = uint32_t(a.x) | (uint32_t(a.y) << 16);
  high = uint32_t(b.x) | (uint32_t(b.y) << 16);
#endif
}

// d += A B for one m16n8k16 tile whose rows 8..15 are zero: a0, a2 hold row group_id's columns
// (2 t, 2 t + 1) and (2 t + 8, 2 t + 9), b0, b1 the B column group_id's rows likewise, d0, d1 the
// row group_id's output columns 2 t, 2 t + 1 (group_id = lane / 4, t = lane % 4). The zero rows'
// outputs are dropped.
template <typename E>
__device__ __forceinline__ void mma_rows8(float& d0, float& d1, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float dropped0, dropped1;
  if constexpr (std::is_same_v<E, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %10, %11};"
        : "+f"(d0), "+f"(d1), "=f"(dropped0), "=f"(dropped1)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1), "f"(0.0f), "f"(0.0f));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %10, %11};"
        : "+f"(d0), "+f"(d1), "=f"(dropped0), "=f"(dropped1)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1), "f"(0.0f), "f"(0.0f));
  }
#else
  __trap();  // tensor_cores_taken() keeps GPUs before compute capability 8.0 off this kernel
#endif
}

// A lane's share of a cache row of which `Lanes` lanes read `Bytes` bytes each: pieces of
// kPiece = min(16, Bytes) bytes, the lane's piece p at bytes (p Lanes + l) kPiece of the row (each
// load instruction of the warp reads whole rows' runs of Lanes kPiece contiguous bytes).
template <int Bytes, int Lanes>
struct LaneShare {
  static constexpr int kPiece = Bytes < 16 ? Bytes : 16;
  static constexpr int kPieces = Bytes / kPiece;
  static constexpr int kWords = Bytes / 4;
  static_assert(Bytes % 8 == 0 && Bytes % kPiece == 0, "a share is whole 8- or 16-byte pieces");

  // The row's element (of `element` bytes) that the share's element e is, for lane l.
  __device__ static __forceinline__ int element_of(int e, int l, int element) {
    const int byte = e * element;
    return ((byte / kPiece * Lanes + l) * kPiece + byte % kPiece) / element;
  }

  // The share of lane l of the row at `row` (16-byte aligned), or zeros where !valid.
  __device__ static __forceinline__ void load(const uint8_t* row, int l, bool valid, uint32_t (&words)[kWords]) {
#pragma unroll
    for (int p = 0; p < kPieces; ++p) {
      const uint8_t* at = row + (p * Lanes + l) * kPiece;
      if constexpr (kPiece == 16) {
        const uint4 v = valid ? __ldg(reinterpret_cast<const uint4*>(at)) : make_uint4(0, 0, 0, 0);
        words[4 * p] = v.x, words[4 * p + 1] = v.y, words[4 * p + 2] = v.z, words[4 * p + 3] = v.w;
      } else {
        const uint2 v = valid ? __ldg(reinterpret_cast<const uint2*>(at)) : make_uint2(0, 0);
        words[2 * p] = v.x, words[2 * p + 1] = v.y;
      }
    }
  }
};

// One block per (key/value head j, row b, split s), as decode_attention_blocks, 4 warps; warp w
// takes the split's 16-key tiles w, w + 4, ... Lane (g, t) = (lane / 4, lane % 4) holds:
//   query head g's (g < G) share of D / 4 values as the A operand of S's D / 16 k-steps;
//   keys kb + g and kb + 8 + g (the B columns of S's two 8-key tiles): the same share of each;
//   values of keys kb + 2t, kb + 2t + 1, kb + 2t + 8, kb + 2t + 9 (the B rows of O's tiles): a
//     share of D / 8 values each, the output columns of lane group g;
//   scores of head g for keys kb + 2t, kb + 2t + 1 (tile 0) and kb + 8 + 2t, kb + 9 + 2t (tile 1),
//     which are also P's A operand for O = P V (k = the tile's 16 keys) without a shuffle;
//   head g's output columns of lane groups 2t and 2t + 1, D / 8 each.
// The dot product does not care in which order a key's values are summed, so each lane reads
// whole 16-byte pieces and q is read in the keys' order.
template <typename T, typename C, int D, int G>
__global__ void __launch_bounds__(kThreads, kTensorCoreBlocksAnSm<C>)
    decode_attention_tensor_core_blocks(const T* __restrict__ q, const C* __restrict__ keys,
                                        const C* __restrict__ values, const int32_t* __restrict__ key_offsets,
                                        const int32_t* __restrict__ keys_used, T* __restrict__ out,
                                        float* __restrict__ workspace, int heads, int kv_heads, bool group_major,
                                        float scale) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  using E = MmaElement<T, C>;
  constexpr bool kCodes = std::is_same_v<C, uint8_t>;
  constexpr int kElement = int(sizeof(C));
  constexpr int kSteps = D / 16;  // k-steps of S = Q K^T
  constexpr int kTiles = D / 8;   // 8-column tiles of O = P V
  constexpr int kTileKeys = 16;
  using KeyShare = LaneShare<D / 4 * kElement, 4>;
  using ValueShare = LaneShare<D / 8 * kElement, 8>;
  static_assert(G <= 8, "the query heads of a group are rows 0..7 of the tile");
  static_assert(D == 64 || D == 128, "head_dim 64 or 128 (registers)");
  __shared__ __align__(16) float shared_acc[kWarps][G][D];
  __shared__ float shared_max[kWarps][G], shared_sum[kWarps][G];

  const int j = blockIdx.x, row = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int used = max(keys_used[row], 0);
  int lo, hi;
  split_range(used, lo, hi);

  // Query head g's values in its keys' share order, as A operand pairs: step s takes share
  // elements (4s, 4s + 1) and (4s + 2, 4s + 3). Rows g >= G stay zero. The scale goes on the
  // float32 scores, so q keeps its own bits here.
  uint32_t query_pairs[kSteps][2];
  {
    const T* head = q + (int64_t(row) * heads + head_place(min(g, G - 1), j, G, kv_heads, group_major)) * D;
    const auto value = [&](int e) {
      if (g >= G) return 0.0f;
      const float v = device::to_float(head[KeyShare::element_of(e, t, kElement)]);
      return kCodes ? fminf(fmaxf(v, -65504.0f), 65504.0f) : v;  // float16's range
    };
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      query_pairs[s][0] = pair_bits<E>(value(4 * s), value(4 * s + 1));
      query_pairs[s][1] = pair_bits<E>(value(4 * s + 2), value(4 * s + 3));
    }
  }
  const float score_scale = scale * kLog2e;  // scores in base 2 (exp2f)

  float max_score = -INFINITY, sum = 0.0f;  // head g's, over this lane's keys (the max: the warp's)
  float acc[kTiles][2];
#pragma unroll
  for (int u = 0; u < kTiles; ++u) acc[u][0] = acc[u][1] = 0.0f;

  const int64_t key_stride = int64_t(kv_heads) * D;  // elements from one key of head j to the next
  const int64_t first = (int64_t(key_offsets[row]) * kv_heads + j) * D;
  const uint8_t* key_rows = reinterpret_cast<const uint8_t*>(keys + first);
  const uint8_t* value_rows = reinterpret_cast<const uint8_t*>(values + first);
  const auto key_row = [&](const uint8_t* base, int key) { return base + int64_t(key) * key_stride * kElement; };

  for (int kb = lo + warp * kTileKeys; kb < hi; kb += kWarps * kTileKeys) {
    // Every load of the tile first: 2 keys' and 4 values' shares in flight at once.
    uint32_t key_words[2][KeyShare::kWords], value_words[4][ValueShare::kWords];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int key = kb + 8 * n + g;
      KeyShare::load(key_row(key_rows, key), t, key < hi, key_words[n]);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int key = kb + 2 * t + (r & 1) + 8 * (r >> 1);  // B rows 2t, 2t + 1, 2t + 8, 2t + 9
      ValueShare::load(key_row(value_rows, key), g, key < hi, value_words[r]);
    }

    // S = Q K^T: score[n][c] for head g and key kb + 8n + 2t + c.
    float score[2][2];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      score[n][0] = score[n][1] = 0.0f;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        uint32_t b0, b1;
        if constexpr (kCodes) {
          e4m3x4_to_half_pairs(key_words[n][s], b0, b1);  // share elements 4s .. 4s + 3
        } else {
          b0 = key_words[n][2 * s];
          b1 = key_words[n][2 * s + 1];
        }
        mma_rows8<E>(score[n][0], score[n][1], query_pairs[s][0], query_pairs[s][1], b0, b1);
      }
    }

    // One online-softmax update a tile (the 4 lanes of a head hold its 16 scores).
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const bool valid = kb + 8 * n + 2 * t + c < hi;
        score[n][c] = valid ? score[n][c] * score_scale : -INFINITY;
        tile_max = fmaxf(tile_max, score[n][c]);
      }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 2));
    const float new_max = fmaxf(max_score, tile_max);  // finite: key kb is in range
    const float old_scale = rescale(max_score, new_max);
    max_score = new_max;
    float p[2][2];
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) p[n][c] = exp2f(score[n][c] - new_max);  // 0 for -inf
    sum = fmaf(sum, old_scale, (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
    const uint32_t p0 = pair_bits<E>(p[0][0], p[0][1]), p1 = pair_bits<E>(p[1][0], p[1][1]);

    // O += P V: B column g of tile u is share element u of lane g's values; rows 2t, 2t + 1 pair
    // into b0 and 2t + 8, 2t + 9 into b1.
#pragma unroll
    for (int u = 0; u < kTiles; ++u) {
      uint32_t b0, b1;
      if constexpr (kCodes) {
        // Code u % 4 of word u / 4 of two values' shares, side by side, then to float16 pairs.
        const int w = u / 4, r = u % 4;
        const unsigned selector = r < 2 ? 0x5140u : 0x7362u;  // bytes (a0 b0 a1 b1) or (a2 b2 a3 b3)
        uint32_t low, high;
        e4m3x4_to_half_pairs(__byte_perm(value_words[0][w], value_words[1][w], selector), low, high);
        b0 = r % 2 == 0 ? low : high;
        e4m3x4_to_half_pairs(__byte_perm(value_words[2][w], value_words[3][w], selector), low, high);
        b1 = r % 2 == 0 ? low : high;
      } else {
        // Half u % 2 of word u / 2 of each.
        const int w = u / 2;
        const unsigned selector = u % 2 == 0 ? 0x5410u : 0x7632u;
        b0 = __byte_perm(value_words[0][w], value_words[1][w], selector);
        b1 = __byte_perm(value_words[2][w], value_words[3][w], selector);
      }
      acc[u][0] *= old_scale;
      acc[u][1] *= old_scale;
      mma_rows8<E>(acc[u][0], acc[u][1], p0, p1, b0, b1);
    }
  }

  // Head g's sum over its 4 lanes; the max is already the warp's. Then the warps through shared
  // memory, as the scalar kernel.
  sum += __shfl_xor_sync(kFullMask, sum, 1);
  sum += __shfl_xor_sync(kFullMask, sum, 2);
  if (g < G) {
#pragma unroll
    for (int u = 0; u < kTiles; ++u)
#pragma unroll
      for (int c = 0; c < 2; ++c) shared_acc[warp][g][ValueShare::element_of(u, 2 * t + c, kElement)] = acc[u][c];
    if (t == 0) {
      shared_max[warp][g] = max_score;
      shared_sum[warp][g] = sum;
    }
  }
  __syncthreads();
  write_block_result<T, D, G>(shared_acc, shared_max, shared_sum, out, workspace, row, j, heads, kv_heads, group_major);
}

// One block of `dim` threads per output head (rows * heads of them): the splits' partials of
// decode_attention_blocks merged and normalised, thread d writing value d.
template <typename T>
__global__ void merge_splits(const float* __restrict__ workspace, T* __restrict__ out, int64_t outputs, int dim,
                             int splits) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  const int64_t output = blockIdx.x;
  const int d = threadIdx.x;
  const float* maxima = workspace + int64_t(splits) * outputs * dim;
  const float* sums = maxima + int64_t(splits) * outputs;
  float all_max = -INFINITY;
  for (int s = 0; s < splits; ++s) all_max = fmaxf(all_max, maxima[s * outputs + output]);
  float total = 0.0f, acc = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float factor = rescale(maxima[s * outputs + output], all_max);
    total += sums[s * outputs + output] * factor;
    acc += workspace[(s * outputs + output) * dim + d] * factor;
  }
  store(out + output * dim + d, total > 0.0f ? acc / total : 0.0f);
}

struct Problem {
  const void *q, *keys, *values;
  FreshTokens fresh;
  const int32_t *key_offsets, *keys_used;
  void* out;
  float* workspace;
  int64_t rows, heads, kv_heads, dim;
  bool group_major;
  float scale;
  int splits;
  bool fp8_cache;
  bool tensor_cores;  // decode_attention_tensor_core_blocks (checked by run())
  cudaStream_t stream;
};

// The splits' partials of either kernel merged into out.
template <typename T, int D>
cudaError_t merge(const Problem& p) {
  const int64_t outputs = p.rows * p.heads;
  return launch_dependent(merge_splits<T>, dim3(unsigned(outputs)), dim3(unsigned(D)), 0, p.stream, p.workspace,
                          static_cast<T*>(p.out), outputs, D, p.splits);
}

template <typename T, typename C, int D, int G>
cudaError_t launch(const Problem& p) {
  const dim3 grid(unsigned(p.kv_heads), unsigned(p.rows), unsigned(p.splits));
  if constexpr (D <= 128) {
    if (p.tensor_cores) {
      const cudaError_t launched = launch_dependent(
          decode_attention_tensor_core_blocks<T, C, D, G>, grid, dim3(kThreads), 0, p.stream,
          static_cast<const T*>(p.q), static_cast<const C*>(p.keys), static_cast<const C*>(p.values), p.key_offsets,
          p.keys_used, static_cast<T*>(p.out), p.workspace, int(p.heads), int(p.kv_heads), p.group_major, p.scale);
      return p.splits == 1 || launched != cudaSuccess ? launched : merge<T, D>(p);
    }
  }
  const cudaError_t launched = launch_dependent(
      decode_attention_blocks<T, C, D, G>, grid, dim3(kThreads), 0, p.stream, static_cast<const T*>(p.q),
      static_cast<const C*>(p.keys), static_cast<const C*>(p.values), p.key_offsets, p.keys_used, static_cast<T*>(p.out),
      p.workspace, int(p.heads), int(p.kv_heads), p.group_major, p.scale,
      FreshArgs<T, C>{static_cast<const T*>(p.fresh.qkv), static_cast<const T*>(p.fresh.q_weight),
                      static_cast<const T*>(p.fresh.k_weight), static_cast<const T*>(p.fresh.cos),
                      static_cast<const T*>(p.fresh.sin), p.fresh.write_index, static_cast<C*>(p.fresh.keys),
                      static_cast<C*>(p.fresh.values), p.fresh.eps});
  return p.splits == 1 || launched != cudaSuccess ? launched : merge<T, D>(p);
}

template <typename T, typename C, int D>
cudaError_t launch_for_groups(const Problem& p) {
  switch (p.heads / p.kv_heads) {
    case 1: return launch<T, C, D, 1>(p);
    case 2: return launch<T, C, D, 2>(p);
    case 3: return launch<T, C, D, 3>(p);
    case 4: return launch<T, C, D, 4>(p);
    case 5: return launch<T, C, D, 5>(p);
    case 6: return launch<T, C, D, 6>(p);
    case 7: return launch<T, C, D, 7>(p);
    case 8: return launch<T, C, D, 8>(p);
  }
  return cudaErrorInvalidValue;
}

template <typename T, typename C>
cudaError_t launch_for_dim(const Problem& p) {
  switch (p.dim) {
    case 64: return launch_for_groups<T, C, 64>(p);
    case 128: return launch_for_groups<T, C, 128>(p);
    case 256: return launch_for_groups<T, C, 256>(p);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t launch_for_cache(const Problem& p) {
  return p.fp8_cache ? launch_for_dim<T, uint8_t>(p) : launch_for_dim<T, T>(p);
}

}  // namespace

bool decode_attention_supports(DType dtype, int64_t dim, int64_t groups) {
  return (dtype == DType::f16 || dtype == DType::bf16) && (dim == 64 || dim == 128 || dim == 256) && groups >= 1 &&
         groups <= kMaxGroups;
}

int decode_attention_splits(int64_t rows, int64_t kv_heads, int64_t max_keys, int sm_count) {
  const int64_t blocks = rows * kv_heads;
  if (blocks < 1 || sm_count < 1) return 1;
  // A split for about every kKeysASplit keys, and at least a block a SM. Measured on an H100 at
  // Qwen3-0.6B's attention shape (engine_bench, 2026-12-06), us a layer by splits 1 / 2 / 3 / 4:
  // B = 64, 384 keys 42.7 / 51.9 / 46.3 / 48.9; B = 64, 2048 keys 202.1 / 231.9 / 193.5 / 204.2;
  // B = 256, 384 keys 150.3 / 153.4 / 156.5 / 157.6; B = 256, 2048 keys 773.4 / 730.8 / 725.8 /
  // 721.9: this rule picks 1, 3, 1 and 3, each within 0.6 % of the fastest. Splitting short rows
  // that already fill the GPU costs the merge and a second, partial wave of blocks.
  int64_t splits = std::max<int64_t>((max_keys + kKeysASplit / 2) / kKeysASplit, 1);
  splits = std::max<int64_t>(splits, (sm_count + blocks - 1) / blocks);
  splits = std::min<int64_t>(splits, kMaxSplits);
  splits = std::min<int64_t>(splits, (max_keys + kKeysPerSplit - 1) / kKeysPerSplit);
  return int(std::max<int64_t>(splits, 1));
}

int64_t decode_attention_workspace_floats(int64_t rows, int64_t heads, int64_t dim, int splits) {
  return splits > 1 ? int64_t(splits) * rows * heads * (dim + 2) : 0;
}

namespace {

cudaError_t run(DType dtype, const Problem& p) {
  if (p.kv_heads < 1 || p.heads % p.kv_heads != 0 || !decode_attention_supports(dtype, p.dim, p.heads / p.kv_heads))
    return cudaErrorInvalidValue;
  // Grid limits: kv_heads x rows x splits blocks, rows * heads merge blocks.
  if (p.rows < 0 || p.rows > 65535 || p.kv_heads > 65535 || p.splits < 1 || p.splits > 65535)
    return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  if (!aligned16({p.q, p.keys, p.values}) || (p.splits > 1 && p.workspace == nullptr)) return cudaErrorInvalidValue;
  return dtype == DType::f16 ? launch_for_cache<__half>(p) : launch_for_cache<__nv_bfloat16>(p);
}

std::atomic<bool> from_qkv_on{false};
std::atomic<bool> tensor_cores_on{false};

// Whether decode_attention() takes decode_attention_tensor_core_blocks for this head dim on the
// current device: switched on, head_dim 64 or 128 (its registers), mma.sync (compute capability 8.0 on).
bool tensor_cores_taken(int64_t dim) {
  int major = 0, sm_count = 0;
  return tensor_cores_on && (dim == 64 || dim == 128) && current_device(major, sm_count) && major >= 8;
}

}  // namespace

cudaError_t decode_attention(DType dtype, bool fp8_cache, const void* q, const void* keys, const void* values,
                             const int32_t* key_offsets, const int32_t* keys_used, void* out, float* workspace,
                             int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim, bool group_major, float scale,
                             int splits, cudaStream_t stream) {
  if (q == nullptr) return cudaErrorInvalidValue;
  return run(dtype, Problem{q, keys, values, FreshTokens{}, key_offsets, keys_used, out, workspace, rows, heads,
                            kv_heads, dim, group_major, scale, splits, fp8_cache, tensor_cores_taken(dim), stream});
}

cudaError_t decode_attention_from_qkv(DType dtype, bool fp8_cache, const FreshTokens& fresh,
                                      const int32_t* key_offsets, const int32_t* keys_used, void* out,
                                      float* workspace, int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim,
                                      bool group_major, float scale, int splits, cudaStream_t stream) {
  if (fresh.qkv == nullptr || fresh.cos == nullptr || fresh.sin == nullptr || fresh.write_index == nullptr ||
      fresh.keys == nullptr || fresh.values == nullptr)
    return cudaErrorInvalidValue;
  // The kernel reads the caches through `keys` and `values` and writes them through fresh's.
  return run(dtype, Problem{fresh.qkv, fresh.keys, fresh.values, fresh, key_offsets, keys_used, out, workspace, rows,
                            heads, kv_heads, dim, group_major, scale, splits, fp8_cache, /*tensor_cores=*/false,
                            stream});
}

void set_decode_attention_from_qkv(bool on) { from_qkv_on = on; }
bool decode_attention_from_qkv_enabled() { return from_qkv_on; }

void set_decode_attention_tensor_cores(bool on) { tensor_cores_on = on; }
bool decode_attention_tensor_cores_enabled() { return tensor_cores_on; }

}  // namespace turnrl::decoder_kernels
