#include "fused_decode.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "decode_kernels.cuh"
#include "turnrl/core/error.h"

namespace turnrl::detail {
namespace {

namespace dk = decode_kernels;

dk::DType kernel_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return dk::DType::f32;
    case torch::kHalf: return dk::DType::f16;
    case torch::kBFloat16: return dk::DType::bf16;
    default: fail("fused decode: dtype {} (allowed: float32, float16, bfloat16)", c10::toString(t.scalar_type()));
  }
}

cudaStream_t stream_of(const torch::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

void check(cudaError_t status, const char* kernel) {
  if (status != cudaSuccess) fail("fused decode: {} kernel failed to launch: {}", kernel, cudaGetErrorString(status));
}

const void* data_or_null(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace

bool fused_decode_supported(const torch::Tensor& like) {
  const auto type = like.scalar_type();
  return like.is_cuda() && (type == torch::kFloat || type == torch::kHalf || type == torch::kBFloat16);
}

torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const torch::Tensor input = x.contiguous();
  torch::Tensor out = torch::empty_like(input);
  const int64_t dim = input.size(-1);
  check(dk::rms_norm(kernel_dtype(input), input.data_ptr(), nullptr, nullptr, weight.data_ptr(), out.data_ptr(),
                     input.numel() / dim, dim, float(eps), stream_of(input)),
        "rms_norm");
  return out;
}

std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor& x, const torch::Tensor& delta,
                                                           const torch::Tensor& weight, double eps) {
  const torch::Tensor a = x.contiguous(), b = delta.contiguous();
  torch::Tensor sum = torch::empty_like(a), out = torch::empty_like(a);
  const int64_t dim = a.size(-1);
  check(dk::rms_norm(kernel_dtype(a), a.data_ptr(), b.data_ptr(), sum.data_ptr(), weight.data_ptr(), out.data_ptr(),
                     a.numel() / dim, dim, float(eps), stream_of(a)),
        "add_rms_norm");
  return {sum, out};
}

torch::Tensor fused_norm_rotary(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& cos,
                                const torch::Tensor& sin, double eps) {
  const torch::Tensor input = x.contiguous();
  const torch::Tensor c = cos.to(input.scalar_type()).contiguous(), s = sin.to(input.scalar_type()).contiguous();
  const int64_t tokens = input.size(0) * input.size(1), heads = input.size(2), dim = input.size(3);
  if (c.numel() != tokens * dim / 2)
    fail("fused decode: cos has {} values, {} tokens of head_dim {} need {}", c.numel(), tokens, dim, tokens * dim / 2);
  torch::Tensor out = torch::empty_like(input);
  check(dk::norm_rotary(kernel_dtype(input), input.data_ptr(), data_or_null(weight), c.data_ptr(), s.data_ptr(),
                        out.data_ptr(), tokens, heads, dim, float(eps), stream_of(input)),
        "norm_rotary");
  return out;
}

torch::Tensor fused_silu_mul(const torch::Tensor& gate, const torch::Tensor& up) {
  const torch::Tensor g = gate.contiguous(), u = up.contiguous();
  torch::Tensor out = torch::empty_like(g);
  check(dk::silu_mul(kernel_dtype(g), g.data_ptr(), u.data_ptr(), out.data_ptr(), g.numel(), stream_of(g)), "silu_mul");
  return out;
}

namespace {

// FlashAttention's variable-length forward through the dispatcher, its arguments matched by name
// against the schema of the LibTorch at hand: the op's C++ signature has grown across releases
// (seqused_k, window sizes, alibi slopes), and any argument this code does not know has a default.
// Undefined where the op, or its seqused_k argument, is missing.
torch::Tensor flash_varlen(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& query_offsets, const torch::Tensor& key_offsets, int64_t max_q,
                           int64_t max_k, const torch::Tensor& keys_used) {
  static const auto op = c10::Dispatcher::singleton().findSchema({"aten::_flash_attention_forward", ""});
  if (!op) return {};
  std::vector<c10::IValue> stack;
  bool restricted = false;
  for (const c10::Argument& a : op->schema().arguments()) {
    const std::string& name = a.name();
    if (name == "query") stack.emplace_back(q);
    else if (name == "key") stack.emplace_back(k);
    else if (name == "value") stack.emplace_back(v);
    else if (name == "cum_seq_q") stack.emplace_back(query_offsets);
    else if (name == "cum_seq_k") stack.emplace_back(key_offsets);
    else if (name == "max_q") stack.emplace_back(max_q);
    else if (name == "max_k") stack.emplace_back(max_k);
    else if (name == "dropout_p") stack.emplace_back(0.0);
    else if (name == "is_causal" || name == "return_debug_mask") stack.emplace_back(false);
    else if (name == "seqused_k") {
      stack.emplace_back(keys_used);
      restricted = true;
    } else if (a.default_value()) stack.push_back(*a.default_value());
    else return {};
  }
  if (!restricted) return {};
  op->callBoxed(&stack);
  return stack.front().toTensor();
}

}  // namespace

torch::Tensor fused_slot_attention(const SlotLayout& layout, size_t layer, const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v) {
  const int64_t rows = q.size(0), length = q.size(1), heads = q.size(2), dim = q.size(3);
  const bool half_precision = q.scalar_type() == torch::kHalf || q.scalar_type() == torch::kBFloat16;
  if (length == 1 && half_precision && dim % 8 == 0 && dim <= 256) {
    SlotKVCache& cache = *layout.cache;
    const SlotBatch& batch = *layout.batch;
    const int64_t kv_heads = k.size(2), capacity = cache.capacity();
    const torch::Tensor keys = cache.keys[layer].view({-1, kv_heads, dim});
    const torch::Tensor values = cache.values[layer].view({-1, kv_heads, dim});
    // The cache [slots + 1, capacity, Hkv, D] is already the packed [total, Hkv, D] layout of the
    // variable-length kernel: row b's keys start at slot[b] * capacity and it reads the first
    // start[b] + 1 of them, its own (written here) last. Idle rows (count 0) read one key; their
    // outputs are ignored.
    keys.index_copy_(0, layout.write_index, k.reshape({rows, kv_heads, dim}));
    values.index_copy_(0, layout.write_index, v.reshape({rows, kv_heads, dim}));
    const auto int32 = batch.slot.options().dtype(torch::kInt);
    const torch::Tensor key_offsets =
        torch::cat({(batch.slot * capacity).to(torch::kInt), torch::full({1}, (cache.slots() + 1) * capacity, int32)});
    const torch::Tensor keys_used = (batch.start + batch.count).clamp_min(1).to(torch::kInt);
    const torch::Tensor out = flash_varlen(q.reshape({rows, heads, dim}), keys, values, torch::arange(rows + 1, int32),
                                           key_offsets, 1, batch.read_width, keys_used);
    if (out.defined()) return out.reshape({rows, 1, heads * dim});
  }
  // (Where the flash kernel is missing the keys were stored above already; storing again is harmless.)
  const auto [keys, values] = store_in_slots(layout, layer, k.transpose(1, 2), v.transpose(1, 2));
  return grouped_attention(q.transpose(1, 2), keys, values, layout.attend).transpose(1, 2).reshape({rows, length, -1});
}

}  // namespace turnrl::detail
