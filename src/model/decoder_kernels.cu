#include "decoder_kernels.cuh"
#include "dependent_launch.cuh"
#include "head_rotary.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <initializer_list>
#include <type_traits>

namespace turnrl::decoder_kernels {
namespace {

using namespace device;  // to_float, from_float, rounded, the warp-per-head norm + rotary

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

template <typename T>
__global__ void rms_norm_rows(const T* x, const T* delta, T* sum, const T* weight, T* out, float* rstd, int64_t dim,
                              float eps) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  float squares = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float s = to_float(xr[i]);
    if (delta != nullptr) {
      s = rounded<T>(s + to_float(delta[row * dim + i]));
      sum[row * dim + i] = from_float<T>(s);
    }
    squares += s * s;
  }
  const float scale = rsqrtf(block_sum(squares) / float(dim) + eps);
  if (rstd != nullptr && threadIdx.x == 0) rstd[row] = scale;
  // Each thread reads back only what it wrote itself: no barrier needed between the passes.
  const T* s = delta != nullptr ? sum + row * dim : xr;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    out[row * dim + i] = from_float<T>(to_float(weight[i]) * rounded<T>(to_float(s[i]) * scale));
}

// 16 bytes of T: the unit of the packed kernels' loads and stores.
template <typename T>
struct alignas(16) Pack {
  static constexpr int size = int(16 / sizeof(T));
  T v[size];
};

// rms_norm_rows for rows of packs: thread i holds pack i of its row in registers from load to
// store (one 16-byte load of x, delta and weight each, issued together), where the scalar kernel
// loops over 2-byte loads and reads the sum back. The same roundings, per value, as rms_norm_rows.
// One block a row, blockDim.x >= dim / Pack<T>::size, rounded up to whole warps.
template <typename T>
__global__ void rms_norm_packed_rows(const T* x, const T* delta, T* sum, const T* weight, T* out, float* rstd,
                                     int64_t dim, float eps) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  constexpr int P = Pack<T>::size;
  const int64_t row = blockIdx.x, packs = dim / P, i = threadIdx.x;
  const bool mine = i < packs;
  Pack<T> xv{}, dv{}, wv{};
  if (mine) {
    xv = reinterpret_cast<const Pack<T>*>(x + row * dim)[i];
    if (delta != nullptr) dv = reinterpret_cast<const Pack<T>*>(delta + row * dim)[i];
    wv = reinterpret_cast<const Pack<T>*>(weight)[i];
  }
  float s[P];
  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < P; ++k) {
    s[k] = to_float(xv.v[k]);
    if (delta != nullptr) s[k] = rounded<T>(s[k] + to_float(dv.v[k]));
    squares += s[k] * s[k];
  }
  if (mine && delta != nullptr) {
    Pack<T> sv;
#pragma unroll
    for (int k = 0; k < P; ++k) sv.v[k] = from_float<T>(s[k]);
    reinterpret_cast<Pack<T>*>(sum + row * dim)[i] = sv;
  }
  const float scale = rsqrtf(block_sum(squares) / float(dim) + eps);
  if (rstd != nullptr && threadIdx.x == 0) rstd[row] = scale;
  if (!mine) return;
  Pack<T> ov;
#pragma unroll
  for (int k = 0; k < P; ++k) ov.v[k] = from_float<T>(to_float(wv.v[k]) * rounded<T>(s[k] * scale));
  reinterpret_cast<Pack<T>*>(out + row * dim)[i] = ov;
}

// The pair (a, b) = (x_i, x_{i + dim / 2}) of one head's vector, RMS-normalised with `weight`
// (skipped when null) and rotated by (c, s), as norm_rotary() rounds it. Every thread of the block
// calls it (the norm sums over the block); `mine` says whether the thread holds a pair. The head's
// rsqrt goes to *rstd when not null.
template <typename T>
__device__ __forceinline__ void norm_rotate_pair(float& a, float& b, const T* weight, int64_t i, int64_t half,
                                                 bool mine, float c, float s, float eps, float* rstd) {
  if (weight != nullptr) {
    const float scale = rsqrtf(block_sum(a * a + b * b) / float(2 * half) + eps);
    if (rstd != nullptr && threadIdx.x == 0) *rstd = scale;
    if (mine) {
      a = rounded<T>(to_float(weight[i]) * rounded<T>(a * scale));
      b = rounded<T>(to_float(weight[i + half]) * rounded<T>(b * scale));
    }
  }
  // __fmul_rn: each product rounded on its own, never contracted into a fused multiply-add (the
  // plain path multiplies and adds in separate ops).
  const float rotated_a = rounded<T>(__fmul_rn(a, c)) - rounded<T>(__fmul_rn(b, s));
  b = rounded<T>(__fmul_rn(b, c)) + rounded<T>(__fmul_rn(a, s));
  a = rotated_a;
}

// One block per (token, head), thread i owns the pair (i, i + dim / 2).
template <typename T>
__global__ void norm_rotary_heads(const T* x, const T* weight, const T* cos, const T* sin, T* out, float* rstd,
                                  int64_t heads, int64_t dim, float eps) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  const int64_t row = blockIdx.x, token = row / heads, half = dim / 2;
  const int64_t i = threadIdx.x;
  const bool mine = i < half;
  float a = mine ? to_float(x[row * dim + i]) : 0.0f, b = mine ? to_float(x[row * dim + i + half]) : 0.0f;
  const float c = mine ? to_float(cos[token * half + i]) : 0.0f, s = mine ? to_float(sin[token * half + i]) : 0.0f;
  norm_rotate_pair<T>(a, b, weight, i, half, mine, c, s, eps, rstd != nullptr ? rstd + row : nullptr);
  if (!mine) return;
  out[row * dim + i] = from_float<T>(a);
  out[row * dim + i + half] = from_float<T>(b);
}

// One block per (token, head of the merged q/k/v row), thread i owns the pair (i, i + dim / 2):
// query heads normed and rotated into q_out (at their group-major place when group_major), key
// heads normed and rotated into the keys cache at row write_index[token], value heads copied into
// the values cache there. C: the caches' element, T or uint8_t e4m3 codes (to_cache).
template <typename T, typename C>
__global__ void qkv_rotary_store_heads(const T* qkv, const T* q_weight, const T* k_weight, const T* cos, const T* sin,
                                       T* q_out, C* keys, C* values, const int64_t* write_index, int64_t heads,
                                       int64_t kv_heads, int64_t dim, float eps, bool group_major) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  const int64_t all = heads + 2 * kv_heads, token = blockIdx.x / all, head = blockIdx.x % all, half = dim / 2;
  const int64_t i = threadIdx.x;
  const bool mine = i < half;
  const T* x = qkv + (token * all + head) * dim;
  if (head >= heads + kv_heads) {  // a value head: the whole block takes this branch
    if (!mine) return;
    C* to = values + (write_index[token] * kv_heads + head - heads - kv_heads) * dim;
    to[i] = to_cache<T, C>(to_float(x[i]));
    to[i + half] = to_cache<T, C>(to_float(x[i + half]));
    return;
  }
  const bool query = head < heads;
  float a = mine ? to_float(x[i]) : 0.0f, b = mine ? to_float(x[i + half]) : 0.0f;
  const float c = mine ? to_float(cos[token * half + i]) : 0.0f, s = mine ? to_float(sin[token * half + i]) : 0.0f;
  norm_rotate_pair<T>(a, b, query ? q_weight : k_weight, i, half, mine, c, s, eps, nullptr);
  if (!mine) return;
  if (query) {
    // Query head h = j * groups + i_g serves key/value head j; group-major order puts it at
    // i_g * kv_heads + j, which is the layout of `groups` query rows of kv_heads heads each.
    const int64_t groups = heads / kv_heads;
    const int64_t place = group_major ? (head % groups) * kv_heads + head / groups : head;
    T* to = q_out + (token * heads + place) * dim;
    to[i] = from_float<T>(a);
    to[i + half] = from_float<T>(b);
    return;
  }
  C* to = keys + (write_index[token] * kv_heads + head - heads) * dim;
  to[i] = to_cache<T, C>(a);
  to[i + half] = to_cache<T, C>(b);
}

// out [n / width, width] = to_dtype(silu(gate)) * up, where row r's gate and up values start at
// r * stride (stride == width for separate gate and up tensors; 2 * width with up = gate + width
// for one merged [rows, 2 * width] projection).
template <typename T>
__global__ void silu_mul_values(const T* gate, const T* up, T* out, int64_t n, int64_t width, int64_t stride) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t at = stride == width ? i : (i / width) * stride + i % width;
    const float g = to_float(gate[at]);
    out[i] = from_float<T>(rounded<T>(g / (1.0f + expf(-g))) * to_float(up[at]));
  }
}

constexpr int kHeadWarps = 4;  // heads (one a warp) in a block of the warp-per-head kernels

// norm_rotary_heads with one warp a (token, head) row (head_dim = 64 J).
template <typename T, int J>
__global__ void norm_rotary_warps(const T* x, const T* weight, const T* cos, const T* sin, T* out, float* rstd,
                                  int64_t rows, int64_t heads, float eps) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  constexpr int64_t half = 32 * J, dim = 2 * half;
  const int64_t row = int64_t(blockIdx.x) * kHeadWarps + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp
  const int lane = threadIdx.x % 32;
  const int64_t token = row / heads;
  float a[J], b[J], c[J], s[J];
  load_head_pairs<T, J>(x + row * dim, cos + token * half, sin + token * half, lane, a, b, c, s);
  warp_norm_rotate<T, J>(a, b, c, s, weight, lane, eps, rstd != nullptr ? rstd + row : nullptr);
  store_head_pairs<T, J>(out + row * dim, lane, a, b);
}

// qkv_rotary_store_heads with one warp a (token, head of the merged row) (head_dim = 64 J).
template <typename T, int J, typename C>
__global__ void qkv_rotary_store_warps(const T* qkv, const T* q_weight, const T* k_weight, const T* cos, const T* sin,
                                       T* q_out, C* keys, C* values, const int64_t* write_index, int64_t rows,
                                       int64_t heads, int64_t kv_heads, float eps, bool group_major) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  constexpr int64_t half = 32 * J, dim = 2 * half;
  const int64_t all = heads + 2 * kv_heads, at = int64_t(blockIdx.x) * kHeadWarps + threadIdx.x / 32;
  if (at >= rows) return;  // the whole warp
  const int64_t token = at / all, head = at % all;
  const int lane = threadIdx.x % 32;
  const T* x = qkv + at * dim;
  if (head >= heads + kv_heads) {  // a value head, copied as it is (or as codes)
    C* to = values + (write_index[token] * kv_heads + head - heads - kv_heads) * dim;
#pragma unroll
    for (int j = 0; j < 2 * J; ++j) to[lane + 32 * j] = to_cache<T, C>(to_float(x[lane + 32 * j]));
    return;
  }
  const bool query = head < heads;
  float a[J], b[J], c[J], s[J];
  load_head_pairs<T, J>(x, cos + token * half, sin + token * half, lane, a, b, c, s);
  warp_norm_rotate<T, J>(a, b, c, s, query ? q_weight : k_weight, lane, eps, nullptr);
  if (query) {  // group-major place as in qkv_rotary_store_heads
    const int64_t groups = heads / kv_heads;
    const int64_t place = group_major ? (head % groups) * kv_heads + head / groups : head;
    store_head_pairs<T, J>(q_out + (token * heads + place) * dim, lane, a, b);
  } else {
    store_head_pairs<T, J, C>(keys + (write_index[token] * kv_heads + head - heads) * dim, lane, a, b);
  }
}

// silu_mul_values a pack of values a thread (n, width and stride counted in packs).
template <typename T>
__global__ void silu_mul_packs(const T* gate, const T* up, T* out, int64_t n, int64_t width, int64_t stride) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  using V = Pack<T>;
  const V* g_packs = reinterpret_cast<const V*>(gate);
  const V* u_packs = reinterpret_cast<const V*>(up);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t at = stride == width ? i : (i / width) * stride + i % width;
    const V g = g_packs[at], u = u_packs[at];
    V o;
#pragma unroll
    for (int k = 0; k < V::size; ++k) {
      const float x = to_float(g.v[k]);
      o.v[k] = from_float<T>(rounded<T>(x / (1.0f + expf(-x))) * to_float(u.v[k]));
    }
    reinterpret_cast<V*>(out)[i] = o;
  }
}

// Rows handled by one block of a backward kernel: its weight-gradient partial sums are added to
// the global sum once per block, not once per row.
constexpr int64_t kRowsPerBlock = 32;

// dn = dy * weight, n = x * rstd: dx = rstd * (dn - n * mean(dn * n)); dweight += dy * to_dtype(n).
// The partial weight gradient lives in shared memory ([dim] floats).
template <typename T>
__global__ void rms_norm_backward_rows(const T* dy, const T* x, const T* weight, const float* rstd, T* dx,
                                       float* dweight, int64_t rows, int64_t dim) {
  extern __shared__ float partial_dweight[];
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) partial_dweight[i] = 0.0f;
  const int64_t first = int64_t(blockIdx.x) * kRowsPerBlock;
  const int64_t last = first + kRowsPerBlock < rows ? first + kRowsPerBlock : rows;
  for (int64_t row = first; row < last; ++row) {
    const float r = rstd[row];
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float n = to_float(x[row * dim + i]) * r, g = to_float(dy[row * dim + i]);
      dot += g * to_float(weight[i]) * n;
      partial_dweight[i] += g * rounded<T>(n);  // thread i owns column i: no race
    }
    const float mean_dot = block_sum(dot) / float(dim);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float n = to_float(x[row * dim + i]) * r;
      const float dn = to_float(dy[row * dim + i]) * to_float(weight[i]);
      dx[row * dim + i] = from_float<T>(r * (dn - n * mean_dot));
    }
  }
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) atomicAdd(&dweight[i], partial_dweight[i]);
}

// Rows of one block are (token, head) pairs; thread i owns the pair (i, i + dim / 2). The rotation
// is orthogonal: its gradient rotates dy back (angle -theta). Then the norm's gradient as above.
template <typename T>
__global__ void norm_rotary_backward_heads(const T* dy, const T* x, const T* weight, const T* cos, const T* sin,
                                           const float* rstd, T* dx, float* dweight, int64_t rows, int64_t heads,
                                           int64_t dim) {
  const int64_t half = dim / 2, i = threadIdx.x;
  const bool mine = i < half;
  float dweight_low = 0.0f, dweight_high = 0.0f;
  const int64_t first = int64_t(blockIdx.x) * kRowsPerBlock;
  const int64_t last = first + kRowsPerBlock < rows ? first + kRowsPerBlock : rows;
  for (int64_t row = first; row < last; ++row) {
    const int64_t token = row / heads;
    float g1 = 0.0f, g2 = 0.0f, x1 = 0.0f, x2 = 0.0f;
    if (mine) {
      const float c = to_float(cos[token * half + i]), s = to_float(sin[token * half + i]);
      const float dy1 = to_float(dy[row * dim + i]), dy2 = to_float(dy[row * dim + i + half]);
      g1 = dy1 * c + dy2 * s;
      g2 = dy2 * c - dy1 * s;
      x1 = to_float(x[row * dim + i]);
      x2 = to_float(x[row * dim + i + half]);
    }
    if (weight == nullptr) {
      if (mine) {
        dx[row * dim + i] = from_float<T>(g1);
        dx[row * dim + i + half] = from_float<T>(g2);
      }
      continue;
    }
    const float r = rstd[row];
    const float n1 = x1 * r, n2 = x2 * r;
    const float w1 = mine ? to_float(weight[i]) : 0.0f, w2 = mine ? to_float(weight[i + half]) : 0.0f;
    dweight_low += g1 * rounded<T>(n1);
    dweight_high += g2 * rounded<T>(n2);
    const float dn1 = g1 * w1, dn2 = g2 * w2;
    const float mean_dot = block_sum(dn1 * n1 + dn2 * n2) / float(dim);
    if (mine) {
      dx[row * dim + i] = from_float<T>(r * (dn1 - n1 * mean_dot));
      dx[row * dim + i + half] = from_float<T>(r * (dn2 - n2 * mean_dot));
    }
  }
  if (weight != nullptr && mine) {
    atomicAdd(&dweight[i], dweight_low);
    atomicAdd(&dweight[i + half], dweight_high);
  }
}

template <typename T>
__global__ void silu_mul_backward_values(const T* dy, const T* gate, const T* up, T* dgate, T* dup, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = to_float(gate[i]), u = to_float(up[i]), d = to_float(dy[i]);
    const float sigmoid = 1.0f / (1.0f + expf(-g));
    dup[i] = from_float<T>(d * rounded<T>(g * sigmoid));
    dgate[i] = from_float<T>(d * u * sigmoid * (1.0f + g * (1.0f - sigmoid)));
  }
}

// Running (max, sum of exp(x - max), sum of exp(x - max) * x) of a row, merged across threads.
struct SoftmaxStats {
  float max = -INFINITY, sum = 0.0f, weighted = 0.0f;
  __device__ void add(float x) {
    if (x > max) {
      const float scale = __expf(max - x);  // max = -inf at the first value: scale 0
      sum *= scale;
      weighted *= scale;
      max = x;
    }
    const float e = __expf(x - max);
    sum += e;
    weighted += e * x;
  }
  __device__ void merge(const SoftmaxStats& o) {
    if (o.max == -INFINITY) return;
    if (max == -INFINITY) {
      *this = o;
      return;
    }
    const float m = fmaxf(max, o.max), a = __expf(max - m), b = __expf(o.max - m);
    sum = sum * a + o.sum * b;
    weighted = weighted * a + o.weighted * b;
    max = m;
  }
};

__device__ SoftmaxStats shuffle_down(const SoftmaxStats& s, int offset) {
  SoftmaxStats o;
  o.max = __shfl_down_sync(0xffffffffu, s.max, offset);
  o.sum = __shfl_down_sync(0xffffffffu, s.sum, offset);
  o.weighted = __shfl_down_sync(0xffffffffu, s.weighted, offset);
  return o;
}

constexpr int kRowThreads = 512;

// One block per row.
template <typename T>
__global__ void logp_entropy_rows(const T* logits, const int64_t* targets, float* lse, float* logp, float* entropy,
                                  int64_t vocab, float temperature) {
  __shared__ SoftmaxStats partial[kRowThreads / 32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  SoftmaxStats s;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) s.add(__fdiv_rn(to_float(x[j]), temperature));
  for (int offset = 16; offset > 0; offset >>= 1) s.merge(shuffle_down(s, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (threadIdx.x != 0) return;
  SoftmaxStats total = partial[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) total.merge(partial[w]);
  const float log_sum = total.max + logf(total.sum);
  lse[row] = log_sum;
  logp[row] = __fdiv_rn(to_float(x[targets[row]]), temperature) - log_sum;
  entropy[row] = log_sum - total.weighted / total.sum;
}

template <typename T>
__global__ void logp_entropy_backward_rows(const T* logits, const int64_t* targets, const float* lse,
                                           const float* entropy, const float* g_logp, const float* g_entropy,
                                           T* grad_logits, int64_t vocab, float temperature) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  T* out = grad_logits + row * vocab;
  const float log_sum = lse[row], h = entropy[row];
  const float gl = g_logp != nullptr ? g_logp[row] : 0.0f, ge = g_entropy != nullptr ? g_entropy[row] : 0.0f;
  const int64_t target = targets[row];
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float log_p = __fdiv_rn(to_float(x[j]), temperature) - log_sum, p = expf(log_p);
    float g = -p * gl - p * (log_p + h) * ge;
    if (j == target) g += gl;
    out[j] = from_float<T>(__fdiv_rn(g, temperature));
  }
}

// The largest value of a row and its first index.
struct ArgMax {
  float value = -INFINITY;
  int64_t index = -1;
  __device__ void merge(float v, int64_t i) {
    if (v > value || (v == value && i >= 0 && (index < 0 || i < index))) value = v, index = i;
  }
};

// P consecutive values of row x from pack i on, as floats. P = 1: one value. P = 16 / sizeof(T): one
// 16-byte load (x 16-byte aligned), so that a thread has 16 bytes in flight per load instead of 2.
template <typename T, int P>
__device__ __forceinline__ void load_pack(const T* x, int64_t i, float (&out)[P]) {
  if constexpr (P == 1) {
    out[0] = to_float(x[i]);
  } else {
    static_assert(P == Pack<T>::size, "a pack is one 16-byte load");
    const Pack<T> pack = reinterpret_cast<const Pack<T>*>(x)[i];
#pragma unroll
    for (int k = 0; k < P; ++k) out[k] = to_float(pack.v[k]);
  }
}

// Threads of a sampler block: a row's block is alone on its SM at small batches (one row a block),
// so the whole SM's warps share the row's arithmetic.
constexpr int kSampleThreads = 1024;

// One token per row of logits [rows, vocab] from softmax(logits / temperature) at uniform[row]
// (the inverse CDF: the first token whose running probability reaches u times the total, with
// positive probability), or the first argmax where temperature is 0; logp[row] is the token's
// log-prob, (z - max) - log(sum exp(z - max)) with z = logit / temperature (1 for greedy rows), as
// log_softmax computes it. One block of kSampleThreads a row, reading packs of P tokens (P divides
// vocab; load_pack), in three passes:
// 1. the largest logit and its first index: compares only (z's maximum is the largest logit's z,
//    as a correctly rounded division by t > 0 keeps the order);
// 2. each warp's mass sum exp(z - max) over a contiguous range of packs; their sum is the total;
// 3. the warp whose range holds u * total scans it 32 packs at a time (a scan over the lanes' pack
//    masses, then inside the lane's pack).
// The masses are unnormalised, so the division and the exponential are taken once a token in
// pass 2 (and again only over the chosen warp's range), not in every pass.
template <typename T, int P>
__global__ void sample_rows_unfiltered(const T* logits, const float* temperature, const double* uniform,
                                       int64_t* token, float* logp, int64_t vocab) {
  start_after_previous_grid();  // launch_dependent(): nothing before this touches memory
  __shared__ ArgMax best[kSampleThreads / 32];
  __shared__ float warp_mass[kSampleThreads / 32];
  __shared__ float shared_max;
  const int64_t row = blockIdx.x, packs = vocab / P;
  const T* x = logits + row * vocab;
  const bool greedy = temperature[row] == 0.0f;
  const float t = greedy ? 1.0f : temperature[row];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = int(blockDim.x / 32);
  ArgMax arg;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
    float v[P];
    load_pack<T, P>(x, i, v);
#pragma unroll
    for (int k = 0; k < P; ++k) arg.merge(v[k], i * P + k);
  }
  for (int offset = 16; offset > 0; offset >>= 1)
    arg.merge(__shfl_down_sync(0xffffffffu, arg.value, offset), __shfl_down_sync(0xffffffffu, arg.index, offset));
  if (lane == 0) best[warp] = arg;
  __syncthreads();
  if (threadIdx.x == 0) {
    ArgMax top = best[0];
    for (int w = 1; w < warps; ++w) top.merge(best[w].value, best[w].index);
    best[0] = top;
    shared_max = __fdiv_rn(top.value, t);
  }
  __syncthreads();
  const float max = shared_max;
  const auto weight = [&](float value) { return expf(__fdiv_rn(value, t) - max); };
  // Pass 2: each warp's mass over its contiguous range of packs.
  const int64_t span = (packs + warps - 1) / warps, begin = warp * span, end = begin + span < packs ? begin + span : packs;
  float mass = 0.0f;
#pragma unroll 2
  for (int64_t i = begin + lane; i < end; i += 32) {
    float v[P];
    load_pack<T, P>(x, i, v);
#pragma unroll
    for (int k = 0; k < P; ++k) mass += weight(v[k]);
  }
  for (int offset = 16; offset > 0; offset >>= 1) mass += __shfl_down_sync(0xffffffffu, mass, offset);
  if (lane == 0) warp_mass[warp] = mass;
  __syncthreads();
  // Every thread finds the same total and the same warp: the first whose running total reaches
  // the target.
  float running = 0.0f, total = 0.0f;
  for (int w = 0; w < warps; ++w) total += warp_mass[w];
  const float log_sum = logf(total);
  if (greedy) {
    if (threadIdx.x == 0) {
      token[row] = best[0].index;
      logp[row] = (best[0].value - max) - log_sum;
    }
    return;  // uniform across the block
  }
  const float target = float(uniform[row]) * total;
  int chosen = -1;
  for (int w = 0; w < warps && chosen < 0; ++w) {
    if (int64_t(w) * span >= packs) break;
    if (running + warp_mass[w] >= target && warp_mass[w] > 0.0f) chosen = w;
    else running += warp_mass[w];
  }
  if (chosen < 0) {  // rounding put the target past the total: the last warp with mass
    running = 0.0f;
    for (int w = 0; w < warps && int64_t(w) * span < packs; ++w)
      if (warp_mass[w] > 0.0f) chosen = w;
    for (int w = 0; w < chosen; ++w) running += warp_mass[w];
  }
  if (warp != chosen) return;
  const float left = fminf(target - running, warp_mass[chosen]);
  float acc = 0.0f;
  int64_t last_positive = -1;
  for (int64_t base = begin; base < end; base += 32) {
    const int64_t i = base + lane;
    float p[P];
    float own = 0.0f;  // this lane's pack's mass
    if (i < end) {
      load_pack<T, P>(x, i, p);
#pragma unroll
      for (int k = 0; k < P; ++k) own += p[k] = weight(p[k]);
    } else {
#pragma unroll
      for (int k = 0; k < P; ++k) p[k] = 0.0f;
    }
    float scan = own;  // inclusive scan of the pack masses over the lanes
    for (int offset = 1; offset < 32; offset <<= 1) {
      const float other = __shfl_up_sync(0xffffffffu, scan, offset);
      if (lane >= offset) scan += other;
    }
    // Inside the pack, from the mass of the packs before it: the first token that reaches the
    // target with mass of its own, and the last token with any.
    float reached = acc + scan - own;
    int found = -1, last = -1;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      reached += p[k];
      if (p[k] > 0.0f) {
        last = k;
        if (found < 0 && reached >= left) found = k;
      }
    }
    const unsigned hit = __ballot_sync(0xffffffffu, found >= 0);
    const unsigned positive = __ballot_sync(0xffffffffu, last >= 0);
    if (positive != 0) {
      const int src = 31 - __clz(positive);
      last_positive = __shfl_sync(0xffffffffu, i * P + last, src);
    }
    if (hit != 0) {
      const int src = __ffs(hit) - 1;
      const int64_t chosen_token = __shfl_sync(0xffffffffu, i * P + found, src);
      if (lane == 0) {
        token[row] = chosen_token;
        logp[row] = (__fdiv_rn(to_float(x[chosen_token]), t) - max) - log_sum;
      }
      return;
    }
    acc += __shfl_sync(0xffffffffu, scan, 31);
  }
  if (lane == 0) {  // rounding kept the scan below the target: the range's last token with mass
    token[row] = last_positive;
    logp[row] = (__fdiv_rn(to_float(x[last_positive]), t) - max) - log_sum;
  }
}

int threads_for(int64_t work) {
  int threads = 32;
  while (threads < work && threads < 1024) threads *= 2;
  return threads;
}

unsigned blocks_of(int64_t rows, int64_t per_block) { return unsigned((rows + per_block - 1) / per_block); }

// n threads rounded up to whole warps.
int64_t whole_warps(int64_t n) { return (n + 31) / 32 * 32; }

// Whether a head of `dim` values is one warp's in norm_rotary's and qkv_rotary_store's warp kernels
// (dim = 64 J, J = 1, 2 or 4). Both take the warp kernel for exactly these widths, so their
// roundings stay equal to the bit; other widths take the block-a-head kernels.
bool warp_head_width(int64_t dim) { return dim == 64 || dim == 128 || dim == 256; }

// f(std::integral_constant<int, J>()) for a warp_head_width dim = 64 J.
template <typename F>
cudaError_t by_head_pairs(int64_t dim, F&& f) {
  switch (dim) {
    case 64: return f(std::integral_constant<int, 1>());
    case 128: return f(std::integral_constant<int, 2>());
    case 256: return f(std::integral_constant<int, 4>());
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t rms_norm_typed(const void* x, const void* delta, void* sum, const void* weight, void* out, float* rstd,
                           int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  constexpr int P = Pack<T>::size;
  if (dim % P == 0 && dim / P <= 1024 && aligned16({x, delta, sum, weight, out})) {
    return launch_dependent(rms_norm_packed_rows<T>, dim3(unsigned(rows)), dim3(unsigned(whole_warps(dim / P))), 0, stream,
        static_cast<const T*>(x), static_cast<const T*>(delta), static_cast<T*>(sum), static_cast<const T*>(weight),
        static_cast<T*>(out), rstd, dim, eps);
  }
  return launch_dependent(rms_norm_rows<T>, dim3(unsigned(rows)), dim3(threads_for(dim / 4)), 0, stream,
      static_cast<const T*>(x), static_cast<const T*>(delta), static_cast<T*>(sum), static_cast<const T*>(weight),
      static_cast<T*>(out), rstd, dim, eps);
}

template <typename T>
cudaError_t rms_norm_backward_typed(const void* dy, const void* x, const void* weight, const float* rstd, void* dx,
                                    float* dweight, int64_t rows, int64_t dim, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const size_t shared = size_t(dim) * sizeof(float);
  if (shared > 48 * 1024) return cudaErrorInvalidValue;  // dim > 12,288: beyond the default shared memory
  rms_norm_backward_rows<T><<<blocks_of(rows, kRowsPerBlock), threads_for(dim / 4), shared, stream>>>(
      static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(weight), rstd, static_cast<T*>(dx),
      dweight, rows, dim);
  return cudaGetLastError();
}

template <typename T>
cudaError_t norm_rotary_typed(const void* x, const void* weight, const void* cos, const void* sin, void* out,
                              float* rstd, int64_t tokens, int64_t heads, int64_t dim, float eps, cudaStream_t stream) {
  if (tokens * heads == 0) return cudaSuccess;
  const int64_t rows = tokens * heads;
  if (warp_head_width(dim))
    return by_head_pairs(dim, [&](auto pairs) {
      constexpr int J = decltype(pairs)::value;
      return launch_dependent(norm_rotary_warps<T, J>, dim3(blocks_of(rows, kHeadWarps)), dim3(32 * kHeadWarps), 0,
                              stream, static_cast<const T*>(x), static_cast<const T*>(weight),
                              static_cast<const T*>(cos), static_cast<const T*>(sin), static_cast<T*>(out), rstd, rows,
                              heads, eps);
    });
  return launch_dependent(norm_rotary_heads<T>, dim3(unsigned(tokens * heads)), dim3(threads_for(dim / 2)), 0, stream,
      static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(cos), static_cast<const T*>(sin),
      static_cast<T*>(out), rstd, heads, dim, eps);
}

template <typename T>
cudaError_t norm_rotary_backward_typed(const void* dy, const void* x, const void* weight, const void* cos,
                                       const void* sin, const float* rstd, void* dx, float* dweight, int64_t tokens,
                                       int64_t heads, int64_t dim, cudaStream_t stream) {
  const int64_t rows = tokens * heads;
  if (rows == 0) return cudaSuccess;
  norm_rotary_backward_heads<T><<<blocks_of(rows, kRowsPerBlock), threads_for(dim / 2), 0, stream>>>(
      static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(cos),
      static_cast<const T*>(sin), rstd, static_cast<T*>(dx), dweight, rows, heads, dim);
  return cudaGetLastError();
}

template <typename T>
cudaError_t silu_mul_typed(const void* gate, const void* up, void* out, int64_t n, int64_t width, int64_t stride,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  constexpr int P = Pack<T>::size;
  if (width % P == 0 && stride % P == 0 && aligned16({gate, up, out})) {
    const int64_t packs = n / P, blocks = (packs + threads - 1) / threads;
    return launch_dependent(silu_mul_packs<T>, dim3(unsigned(blocks < 65535 ? blocks : 65535)), dim3(threads), 0, stream,
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), packs, width / P, stride / P);
  }
  const int64_t blocks = (n + threads - 1) / threads;
  return launch_dependent(silu_mul_values<T>, dim3(unsigned(blocks < 65535 ? blocks : 65535)), dim3(threads), 0, stream,
      static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), n, width, stride);
}

template <typename T, typename C>
cudaError_t qkv_rotary_store_typed(const void* qkv, const void* q_weight, const void* k_weight, const void* cos,
                                   const void* sin, void* q_out, void* keys, void* values, const int64_t* write_index,
                                   int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim, float eps,
                                   bool group_major, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  if (kv_heads < 1 || heads % kv_heads != 0) return cudaErrorInvalidValue;
  const int64_t rows = tokens * (heads + 2 * kv_heads);
  if (warp_head_width(dim))
    return by_head_pairs(dim, [&](auto pairs) {
      constexpr int J = decltype(pairs)::value;
      return launch_dependent(qkv_rotary_store_warps<T, J, C>, dim3(blocks_of(rows, kHeadWarps)), dim3(32 * kHeadWarps),
                              0, stream, static_cast<const T*>(qkv), static_cast<const T*>(q_weight),
                              static_cast<const T*>(k_weight), static_cast<const T*>(cos), static_cast<const T*>(sin),
                              static_cast<T*>(q_out), static_cast<C*>(keys), static_cast<C*>(values), write_index, rows,
                              heads, kv_heads, eps, group_major);
    });
  return launch_dependent(qkv_rotary_store_heads<T, C>, dim3(unsigned(tokens * (heads + 2 * kv_heads))), dim3(threads_for(dim / 2)), 0, stream,
      static_cast<const T*>(qkv), static_cast<const T*>(q_weight), static_cast<const T*>(k_weight),
      static_cast<const T*>(cos), static_cast<const T*>(sin), static_cast<T*>(q_out), static_cast<C*>(keys),
      static_cast<C*>(values), write_index, heads, kv_heads, dim, eps, group_major);
}

template <typename T>
cudaError_t silu_mul_backward_typed(const void* dy, const void* gate, const void* up, void* dgate, void* dup, int64_t n,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  silu_mul_backward_values<T><<<unsigned(blocks < 65535 ? blocks : 65535), threads, 0, stream>>>(
      static_cast<const T*>(dy), static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(dgate),
      static_cast<T*>(dup), n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t sample_unfiltered_typed(const void* logits, const float* temperature, const double* uniform, int64_t* token,
                                    float* logp, int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (vocab < 1) return cudaErrorInvalidValue;
  // 16-byte packs where every row starts 16-byte aligned (Qwen3's 151,936 and Llama-3's 128,256
  // entries do), one token at a time otherwise.
  constexpr int kPack = Pack<T>::size;
  const auto* x = static_cast<const T*>(logits);
  if (vocab % kPack == 0 && aligned16({x}))
    return launch_dependent(sample_rows_unfiltered<T, kPack>, dim3(unsigned(rows)), dim3(kSampleThreads), 0, stream, x,
                            temperature, uniform, token, logp, vocab);
  return launch_dependent(sample_rows_unfiltered<T, 1>, dim3(unsigned(rows)), dim3(kSampleThreads), 0, stream, x,
                          temperature, uniform, token, logp, vocab);
}

template <typename T>
cudaError_t logp_entropy_typed(const void* logits, const int64_t* targets, float* lse, float* logp, float* entropy,
                               int64_t rows, int64_t vocab, float temperature, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  logp_entropy_rows<T><<<unsigned(rows), kRowThreads, 0, stream>>>(static_cast<const T*>(logits), targets, lse, logp,
                                                                     entropy, vocab, temperature);
  return cudaGetLastError();
}

template <typename T>
cudaError_t logp_entropy_backward_typed(const void* logits, const int64_t* targets, const float* lse,
                                        const float* entropy, const float* g_logp, const float* g_entropy,
                                        void* grad_logits, int64_t rows, int64_t vocab, float temperature,
                                        cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  logp_entropy_backward_rows<T><<<unsigned(rows), kRowThreads, 0, stream>>>(
      static_cast<const T*>(logits), targets, lse, entropy, g_logp, g_entropy, static_cast<T*>(grad_logits), vocab,
      temperature);
  return cudaGetLastError();
}

// Calls f.template operator()<T>() for the element type of dtype.
template <typename F>
cudaError_t by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float());
    case DType::f16: return f(__half());
    case DType::bf16: return f(__nv_bfloat16());
  }
  return cudaErrorInvalidValue;
}

}  // namespace

namespace {
std::atomic<bool> dependent_launch_on{true};
}  // namespace

void set_dependent_launch(bool on) { dependent_launch_on = on; }
bool dependent_launch_enabled() { return dependent_launch_on; }

cudaError_t rms_norm(DType dtype, const void* x, const void* delta, void* sum, const void* weight, void* out,
                     float* rstd, int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    return rms_norm_typed<decltype(zero)>(x, delta, sum, weight, out, rstd, rows, dim, eps, stream);
  });
}

cudaError_t rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const float* rstd,
                              void* dx, float* dweight, int64_t rows, int64_t dim, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    return rms_norm_backward_typed<decltype(zero)>(dy, x, weight, rstd, dx, dweight, rows, dim, stream);
  });
}

cudaError_t norm_rotary(DType dtype, const void* x, const void* weight, const void* cos, const void* sin, void* out,
                        float* rstd, int64_t tokens, int64_t heads, int64_t dim, float eps, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    return norm_rotary_typed<decltype(zero)>(x, weight, cos, sin, out, rstd, tokens, heads, dim, eps, stream);
  });
}

cudaError_t norm_rotary_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* cos,
                                 const void* sin, const float* rstd, void* dx, float* dweight, int64_t tokens,
                                 int64_t heads, int64_t dim, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    return norm_rotary_backward_typed<decltype(zero)>(dy, x, weight, cos, sin, rstd, dx, dweight, tokens, heads, dim,
                                                      stream);
  });
}

cudaError_t silu_mul(DType dtype, const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) { return silu_mul_typed<decltype(zero)>(gate, up, out, n, n, n, stream); });
}

cudaError_t silu_mul_merged(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t width,
                            cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* gate = static_cast<const T*>(gate_up);
    return silu_mul_typed<T>(gate, gate + width, out, rows * width, width, 2 * width, stream);
  });
}

cudaError_t qkv_rotary_store(DType dtype, bool fp8_cache, const void* qkv, const void* q_weight, const void* k_weight,
                             const void* cos, const void* sin, void* q_out, void* keys, void* values,
                             const int64_t* write_index, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim,
                             float eps, bool group_major, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const auto typed = fp8_cache ? qkv_rotary_store_typed<T, uint8_t> : qkv_rotary_store_typed<T, T>;
    return typed(qkv, q_weight, k_weight, cos, sin, q_out, keys, values, write_index, tokens, heads, kv_heads, dim, eps,
                 group_major, stream);
  });
}

cudaError_t silu_mul_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                              int64_t n, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    return silu_mul_backward_typed<decltype(zero)>(dy, gate, up, dgate, dup, n, stream);
  });
}

cudaError_t sample_unfiltered(DType dtype, const void* logits, const float* temperature, const double* uniform,
                              int64_t* token, float* logp, int64_t rows, int64_t vocab, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    return sample_unfiltered_typed<decltype(zero)>(logits, temperature, uniform, token, logp, rows, vocab, stream);
  });
}

cudaError_t logp_entropy(DType dtype, const void* logits, const int64_t* targets, float* lse, float* logp,
                         float* entropy, int64_t rows, int64_t vocab, float temperature, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    return logp_entropy_typed<decltype(zero)>(logits, targets, lse, logp, entropy, rows, vocab, temperature, stream);
  });
}

cudaError_t logp_entropy_backward(DType dtype, const void* logits, const int64_t* targets, const float* lse,
                                  const float* entropy, const float* g_logp, const float* g_entropy, void* grad_logits,
                                  int64_t rows, int64_t vocab, float temperature, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto zero) {
    return logp_entropy_backward_typed<decltype(zero)>(logits, targets, lse, entropy, g_logp, g_entropy, grad_logits,
                                                       rows, vocab, temperature, stream);
  });
}

}  // namespace turnrl::decoder_kernels
