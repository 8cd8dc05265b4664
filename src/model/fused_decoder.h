#pragma once
// The generation engine's fused forward path on a GPU (fused_decoder_cuda.cpp; CUDA builds only):
// one kernel each for RMSNorm (with the residual add before it), a head's RMSNorm plus rotary
// embedding, and the SiLU-gated product, and decode attention that reads each sequence's own cached
// keys in place. A decode step of the plain path launches about 67 small kernels a layer, which is
// what bounds it at rollout batch sizes; this one launches about 15.
#include <cstdint>
#include <utility>

#include <torch/types.h>

#include "decoder_parts.h"

namespace turnrl::detail {

// Whether the fused path serves a model whose parameters look like `like`: a CUDA tensor of
// float32, float16 or bfloat16.
bool fused_kernels_supported(const torch::Tensor& like);

// rms_norm() of decoder_parts.h in one kernel.
torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// {x + delta, rms_norm(x + delta)}: the residual add and the next norm in one kernel.
std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor& x, const torch::Tensor& delta,
                                                           const torch::Tensor& weight, double eps);

// x [B, T, heads, D] -> apply_rotary(rms_norm(x, weight)) (no norm when weight is undefined) for
// cos, sin [B, 1, T, D / 2] in x's dtype, as [B, T, heads, D].
torch::Tensor fused_norm_rotary(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& cos,
                                const torch::Tensor& sin, double eps);

// to_dtype(silu(gate)) * up.
torch::Tensor fused_silu_mul(const torch::Tensor& gate, const torch::Tensor& up);

// One pass over each row of logits [rows, V] (contiguous; float32, float16 or bfloat16) for the
// chunked log-probs (chunked_logp.h): logsumexp, the target's log-prob and the entropy of
// softmax(logits / temperature), float32 [rows].
struct RowSoftmax {
  torch::Tensor lse, logp, entropy;
};
RowSoftmax fused_logp_entropy(const torch::Tensor& logits, const torch::Tensor& targets, double temperature);

// The gradient with respect to the logits (their dtype) of sum(g_logp * logp + g_entropy *
// entropy), from the forward's lse and entropy; an undefined g_* leaves its term out.
torch::Tensor fused_logp_entropy_backward(const torch::Tensor& logits, const torch::Tensor& targets,
                                          const torch::Tensor& lse, const torch::Tensor& entropy,
                                          const torch::Tensor& g_logp, const torch::Tensor& g_entropy,
                                          double temperature);

// draw_tokens() (sampler.h) for rows without top-k or top-p, in one kernel a row (logits [R, V]
// contiguous or not, in the model dtype; temperature float32 [R], 0 = greedy; uniform float64 [R]):
// {token int64 [R], logp float32 [R]}. The same draw as draw_tokens but where float rounding puts
// the target on a token's boundary (the running sums are taken in another order).
std::pair<torch::Tensor, torch::Tensor> fused_sample_unfiltered(const torch::Tensor& logits,
                                                                const torch::Tensor& temperature,
                                                                const torch::Tensor& uniform);

// Whether this LibTorch has FlashAttention's variable-length forward with per-row key counts
// (aten::_flash_attention_forward with seqused_k; LibTorch >= 2.5), which decode attention uses.
bool varlen_decode_attention_available();

// FlashAttention's variable-length forward for one query a row with group-major heads, as
// fused_slot_attention() calls it: q [rows, heads, D] in group-major order read as `groups` query
// rows a token of Hkv heads each (grouped_query_offsets int32 0, groups, 2 groups, ..., rows *
// groups), keys and values [total, Hkv, D], key_offsets int32 [rows + 1] (the last one past every
// row's keys) and keys_used int32 [rows], no row past max_keys. [rows, heads, D] group-major;
// undefined where varlen_decode_attention_available() is false.
torch::Tensor flash_decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                     const torch::Tensor& grouped_query_offsets, const torch::Tensor& key_offsets,
                                     const torch::Tensor& keys_used, int64_t max_keys);

// Split-KV decode attention (src/model/decode_attention.cuh) over the slot cache as it lies, one
// query a row: q [rows, heads, D] (float16 or bfloat16; heads in group-major order with
// group_major), keys and values [total, Hkv, D] contiguous in q's dtype, row b reading keys
// key_offsets[b] .. key_offsets[b] + keys_used[b] - 1 (int32, at least `rows` entries each), none
// more than max_keys. Returns [rows, heads, D] in q's head order, softmax scale D^-0.5. splits: the
// blocks that share a row's keys, 0 = decode_attention_splits() for this GPU and max_keys (fixed
// by the shapes, so a captured graph stays valid whatever the counts). Fails naming the argument
// for shapes the kernel does not take (D 64, 128, 256; 1 to 8 heads a key/value head).
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                               const torch::Tensor& key_offsets, const torch::Tensor& keys_used, bool group_major,
                               int64_t max_keys, int64_t splits = 0);

// The attention of one forward call over the slots, from the merged q/k/v projection's output
// qkv [B, T, (heads + 2 Hkv) * D]. One kernel norms (q_norm, k_norm; undefined: none) and rotates
// the query and key heads and stores the keys and values in the slots. Then, one token a row
// (decode) in float16 or bfloat16: decode_attention() (batch.decode_attention split_kv, where it
// takes the head dim and groups) or FlashAttention's variable-length kernel over the cache as it
// lies, each row reading its slot's start + count keys and nothing past them; with group_major
// and heads > Hkv, the query heads are written in the group-major order in which FlashAttention
// reads them, and the output [B, T, heads * D] comes in that order too (HFDecoder's o_proj copy
// takes its columns in it); several tokens a row: FlashAttention's kernel. Without it:
// grouped_attention() over the slots' rows, heads in order.
struct SlotAttention {
  torch::Tensor out;
  bool group_major = false;  // out's heads in group-major order
};
SlotAttention fused_slot_attention(const SlotLayout& layout, size_t layer, const torch::Tensor& qkv, int64_t heads,
                                   const torch::Tensor& q_norm, const torch::Tensor& k_norm, const torch::Tensor& cos,
                                   const torch::Tensor& sin, double eps, bool group_major);

// x W^T + b (b may be undefined) for the engine's forward calls: decode_linear (decode_gemm.cuh)
// where it is on and takes the problem (at most 64 rows, float16 or bfloat16, compute capability
// 9.0, no gradient to record); else, for a decode step's one-token rows (decode_step), the
// cuBLASLt algorithm measured fastest for the shape (tuned_gemm.h) where that is on; torch's
// linear() otherwise. decode_linear reads W and b before the kernel ahead of it has finished, so
// they must not be that kernel's output (the engine's weights are written between steps, never
// inside one).
torch::Tensor decode_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                            bool decode_step = false);

// silu_mul over one merged gate/up projection's output [..., 2 * I] (gate, then up): [..., I].
torch::Tensor fused_silu_mul_merged(const torch::Tensor& gate_up);

}  // namespace turnrl::detail
