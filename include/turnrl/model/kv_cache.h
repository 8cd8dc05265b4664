#pragma once
// Key/value caches of a decoder for incremental decoding.
//   KVCache      the sampler's cache (prefill / extend): rows are left-padded prompts followed by
//                one token per step, all rows advancing together; key_mask marks which cached
//                columns hold a real token of their row.
//   SlotKVCache  the generation engine's cache: `slots` independent sequences, each with its own
//                length, preallocated once; a SlotBatch says where one forward call reads and writes.
#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace turnrl {

struct KVCache {
  std::vector<torch::Tensor> keys, values;  // per layer [B, kv_heads, capacity, head_dim]
  torch::Tensor key_mask;                   // bool  [B, capacity] valid cached tokens
  torch::Tensor valid_count;                // int64 [B] valid tokens so far (next position)
  int64_t length = 0;                       // columns filled

  // An empty cache; `like` gives the dtype and device of keys and values.
  static KVCache empty(int64_t layers, int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                       const torch::TensorOptions& like);
  int64_t capacity() const { return key_mask.size(1); }
};

// How a SlotKVCache holds keys and values.
enum class KVCacheDtype {
  model,     // in the model's dtype
  // 8-bit e4m3 codes (src/model/fp8_e4m3.h), scale 1, as vLLM's kv_cache_dtype "fp8_e4m3" without
  // calibrated scales: half of bf16's bytes to store and to read each decode step. Each key and
  // value is rounded once more when stored; attention computes in the model dtype.
  fp8_e4m3,
};

// One row per slot plus a scratch row (index `slots`) that absorbs the writes of padding tokens, so
// a forward call never needs a data-dependent shape (what lets a CUDA graph replay it). Position p
// of slot s holds the key and value of the sequence's token p: sequences are not padded.
struct SlotKVCache {
  // per layer [slots + 1, capacity, kv_heads, head_dim], in the model's dtype or as uint8 e4m3 codes
  std::vector<torch::Tensor> keys, values;
  // With fp8 codes: the model's dtype, which they decode to for attention (set by empty()).
  torch::Dtype fp8_decodes_to = torch::kFloat;

  // `like`: the model's dtype and device.
  static SlotKVCache empty(int64_t layers, int64_t slots, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                           const torch::TensorOptions& like, KVCacheDtype storage = KVCacheDtype::model);
  int64_t slots() const { return keys.front().size(0) - 1; }
  int64_t capacity() const { return keys.front().size(1); }
  bool fp8() const { return keys.front().scalar_type() == torch::kByte; }
  // The dtype attention reads keys and values in: the model's.
  torch::Dtype model_dtype() const { return fp8() ? fp8_decodes_to : keys.front().scalar_type(); }
};

// The attention kernel of a decode call (one token a row) on the fused GPU path.
enum class DecodeAttention {
  split_kv,  // turnrl's split-KV kernel (src/model/decode_attention.cuh): each row's keys over several blocks
  flash,     // FlashAttention's variable-length forward, as before split_kv (kept for comparisons)
};

// Where one forward call of tokens [B, T] over a SlotKVCache reads and writes. Row b's first
// count[b] tokens are real: token t goes to position start[b] + t of slot[b] and attends to that
// slot's positions 0 .. start[b] + t. The other tokens are padding (written to the scratch row,
// their outputs meaningless); count 0 makes a whole row idle.
struct SlotBatch {
  torch::Tensor slot;   // int64 [B]
  torch::Tensor start;  // int64 [B] tokens already cached in the slot
  torch::Tensor count;  // int64 [B] real tokens of the row, 0 .. T
  int64_t read_width = 0;  // key columns read per slot, >= every start[b] + count[b], <= capacity
  // slot == 0 .. B-1: attention reads the cache rows in place instead of gathering them.
  bool leading_slots = false;
  // Run the forward call through the fused GPU kernels (one each for the residual add and norm,
  // a head's norm and rotary embedding, the gated MLP product, and decode attention that reads
  // only each row's own keys) where the build has CUDA and the model is on a GPU; ignored elsewhere.
  bool fused_kernels = false;
  // Compute q/k/v and gate/up through the model's merged copies, one GEMM each
  // (HFDecoderImpl::refresh_merged_projections); calls without a gradient only.
  bool merged_projections = false;
  // With fused_kernels, a call of one token a row in float16 or bfloat16: its attention kernel.
  // split_kv takes head dims 64, 128, 256 and 1 to 8 query heads a key/value head; other
  // shapes run FlashAttention's.
  DecodeAttention decode_attention = DecodeAttention::split_kv;
};

}  // namespace turnrl
