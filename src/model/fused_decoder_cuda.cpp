#include "fused_decoder.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>

#include "decoder_kernels.cuh"
#include "turnrl/core/error.h"

namespace turnrl::detail {
namespace {

namespace dk = decoder_kernels;

dk::DType kernel_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return dk::DType::f32;
    case torch::kHalf: return dk::DType::f16;
    case torch::kBFloat16: return dk::DType::bf16;
    default: fail("fused kernels: dtype {} (allowed: float32, float16, bfloat16)", c10::toString(t.scalar_type()));
  }
}

cudaStream_t stream_of(const torch::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

void check(cudaError_t status, const char* kernel) {
  if (status != cudaSuccess) fail("fused kernels: {} kernel failed to launch: {}", kernel, cudaGetErrorString(status));
}

// An absent weight is undefined or empty (autograd functions take only defined tensors).
const void* data_or_null(const torch::Tensor& t) { return t.defined() && t.numel() > 0 ? t.data_ptr() : nullptr; }

}  // namespace

bool fused_kernels_supported(const torch::Tensor& like) {
  const auto type = like.scalar_type();
  return like.is_cuda() && (type == torch::kFloat || type == torch::kHalf || type == torch::kBFloat16);
}

namespace {

namespace ag = torch::autograd;

// Whether a call must record a graph: grad mode on and an input that wants a gradient.
bool differentiable(std::initializer_list<const torch::Tensor*> inputs) {
  if (!torch::GradMode::is_enabled()) return false;
  for (const torch::Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

torch::Tensor float_rows(const torch::Tensor& like, int64_t rows) {
  return torch::empty({rows}, like.options().dtype(torch::kFloat));
}

// rms_norm forward of x, or of x + delta (written to `sum`) when delta is defined; rstd kept when
// defined.
torch::Tensor run_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps, const torch::Tensor& rstd,
                           const torch::Tensor& delta = {}, const torch::Tensor& sum = {}) {
  torch::Tensor out = torch::empty_like(x);
  const int64_t dim = x.size(-1);
  check(dk::rms_norm(kernel_dtype(x), x.data_ptr(), data_or_null(delta), sum.defined() ? sum.data_ptr() : nullptr,
                     weight.data_ptr(), out.data_ptr(), rstd.defined() ? rstd.data_ptr<float>() : nullptr,
                     x.numel() / dim, dim, float(eps), stream_of(x)),
        delta.defined() ? "add_rms_norm" : "rms_norm");
  return out;
}

torch::Tensor run_norm_rotary(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& cos,
                              const torch::Tensor& sin, double eps, const torch::Tensor& rstd) {
  const int64_t tokens = x.size(0) * x.size(1), heads = x.size(2), dim = x.size(3);
  if (cos.numel() != tokens * dim / 2)
    fail("fused kernels: cos has {} values, {} tokens of head_dim {} need {}", cos.numel(), tokens, dim, tokens * dim / 2);
  torch::Tensor out = torch::empty_like(x);
  check(dk::norm_rotary(kernel_dtype(x), x.data_ptr(), data_or_null(weight), cos.data_ptr(), sin.data_ptr(),
                        out.data_ptr(), rstd.defined() ? rstd.data_ptr<float>() : nullptr, tokens, heads, dim, float(eps),
                        stream_of(x)),
        "norm_rotary");
  return out;
}

torch::Tensor run_silu_mul(const torch::Tensor& g, const torch::Tensor& u) {
  torch::Tensor out = torch::empty_like(g);
  check(dk::silu_mul(kernel_dtype(g), g.data_ptr(), u.data_ptr(), out.data_ptr(), g.numel(), stream_of(g)), "silu_mul");
  return out;
}

struct RmsNormFunction : ag::Function<RmsNormFunction> {
  static torch::Tensor forward(ag::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    const torch::Tensor input = x.contiguous();
    const torch::Tensor rstd = float_rows(input, input.numel() / input.size(-1));
    torch::Tensor out = run_rms_norm(input, weight, eps, rstd);
    ctx->save_for_backward({input, weight, rstd});
    return out;
  }
  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const torch::Tensor dy = grads[0].contiguous();
    torch::Tensor dx = torch::empty_like(x);
    torch::Tensor dweight = torch::zeros({x.size(-1)}, x.options().dtype(torch::kFloat));
    const int64_t dim = x.size(-1);
    check(dk::rms_norm_backward(kernel_dtype(x), dy.data_ptr(), x.data_ptr(), weight.data_ptr(), rstd.data_ptr<float>(),
                                dx.data_ptr(), dweight.data_ptr<float>(), x.numel() / dim, dim, stream_of(x)),
          "rms_norm_backward");
    return {dx, dweight.to(weight.scalar_type()), torch::Tensor()};
  }
};

struct NormRotaryFunction : ag::Function<NormRotaryFunction> {
  static torch::Tensor forward(ag::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& cos, const torch::Tensor& sin, double eps) {
    const torch::Tensor input = x.contiguous();
    const torch::Tensor rstd = float_rows(input, input.numel() / input.size(-1));
    torch::Tensor out = run_norm_rotary(input, weight, cos, sin, eps, rstd);
    ctx->save_for_backward({input, weight, cos, sin, rstd});
    return out;
  }
  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &cos = saved[2], &sin = saved[3], &rstd = saved[4];
    const torch::Tensor dy = grads[0].contiguous();
    const int64_t tokens = x.size(0) * x.size(1), heads = x.size(2), dim = x.size(3);
    torch::Tensor dx = torch::empty_like(x);
    torch::Tensor dweight;
    if (weight.numel() > 0) dweight = torch::zeros({dim}, x.options().dtype(torch::kFloat));
    check(dk::norm_rotary_backward(kernel_dtype(x), dy.data_ptr(), x.data_ptr(), data_or_null(weight), cos.data_ptr(),
                                   sin.data_ptr(), rstd.data_ptr<float>(), dx.data_ptr(),
                                   dweight.defined() ? dweight.data_ptr<float>() : nullptr, tokens, heads, dim,
                                   stream_of(x)),
          "norm_rotary_backward");
    return {dx, dweight.defined() ? dweight.to(weight.scalar_type()) : torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

struct SiluMulFunction : ag::Function<SiluMulFunction> {
  static torch::Tensor forward(ag::AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    const torch::Tensor g = gate.contiguous(), u = up.contiguous();
    ctx->save_for_backward({g, u});
    return run_silu_mul(g, u);
  }
  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &g = saved[0], &u = saved[1];
    const torch::Tensor dy = grads[0].contiguous();
    torch::Tensor dg = torch::empty_like(g), du = torch::empty_like(u);
    check(dk::silu_mul_backward(kernel_dtype(g), dy.data_ptr(), g.data_ptr(), u.data_ptr(), dg.data_ptr(),
                                du.data_ptr(), g.numel(), stream_of(g)),
          "silu_mul_backward");
    return {dg, du};
  }
};

}  // namespace

torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (differentiable({&x, &weight})) return RmsNormFunction::apply(x, weight, eps);
  return run_rms_norm(x.contiguous(), weight, eps, {});
}

std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor& x, const torch::Tensor& delta,
                                                           const torch::Tensor& weight, double eps) {
  const torch::Tensor a = x.contiguous();
  const torch::Tensor sum = torch::empty_like(a);
  torch::Tensor out = run_rms_norm(a, weight, eps, {}, delta.contiguous(), sum);
  return {sum, out};
}

torch::Tensor fused_norm_rotary(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& cos,
                                const torch::Tensor& sin, double eps) {
  const torch::Tensor c = cos.to(x.scalar_type()).contiguous(), s = sin.to(x.scalar_type()).contiguous();
  if (differentiable({&x, &weight}))
    return NormRotaryFunction::apply(x, weight.defined() ? weight : torch::empty({0}, x.options()), c, s, eps);
  return run_norm_rotary(x.contiguous(), weight, c, s, eps, {});
}

torch::Tensor fused_silu_mul(const torch::Tensor& gate, const torch::Tensor& up) {
  if (differentiable({&gate, &up})) return SiluMulFunction::apply(gate, up);
  return run_silu_mul(gate.contiguous(), up.contiguous());
}

RowSoftmax fused_logp_entropy(const torch::Tensor& logits, const torch::Tensor& targets, double temperature) {
  const torch::Tensor x = logits.contiguous(), t = targets.contiguous();
  const int64_t rows = x.size(0), vocab = x.size(1);
  RowSoftmax r{float_rows(x, rows), float_rows(x, rows), float_rows(x, rows)};
  check(dk::logp_entropy(kernel_dtype(x), x.data_ptr(), t.data_ptr<int64_t>(), r.lse.data_ptr<float>(),
                         r.logp.data_ptr<float>(), r.entropy.data_ptr<float>(), rows, vocab, float(temperature),
                         stream_of(x)),
        "logp_entropy");
  return r;
}

torch::Tensor fused_logp_entropy_backward(const torch::Tensor& logits, const torch::Tensor& targets,
                                          const torch::Tensor& lse, const torch::Tensor& entropy,
                                          const torch::Tensor& g_logp, const torch::Tensor& g_entropy,
                                          double temperature) {
  const torch::Tensor x = logits.contiguous(), t = targets.contiguous();
  const torch::Tensor gl = g_logp.defined() ? g_logp.to(torch::kFloat).contiguous() : g_logp;
  const torch::Tensor ge = g_entropy.defined() ? g_entropy.to(torch::kFloat).contiguous() : g_entropy;
  torch::Tensor grad = torch::empty_like(x);
  check(dk::logp_entropy_backward(kernel_dtype(x), x.data_ptr(), t.data_ptr<int64_t>(), lse.data_ptr<float>(),
                                  entropy.data_ptr<float>(), gl.defined() ? gl.data_ptr<float>() : nullptr,
                                  ge.defined() ? ge.data_ptr<float>() : nullptr, grad.data_ptr(), x.size(0), x.size(1),
                                  float(temperature), stream_of(x)),
        "logp_entropy_backward");
  return grad;
}

std::pair<torch::Tensor, torch::Tensor> fused_sample_unfiltered(const torch::Tensor& logits,
                                                                const torch::Tensor& temperature,
                                                                const torch::Tensor& uniform) {
  const torch::Tensor x = logits.contiguous();
  const torch::Tensor t = temperature.to(torch::kFloat).contiguous(), u = uniform.to(torch::kDouble).contiguous();
  const int64_t rows = x.size(0);
  if (t.numel() != rows || u.numel() != rows)
    fail("fused_sample_unfiltered: {} rows of logits, {} temperatures, {} uniforms", rows, t.numel(), u.numel());
  torch::Tensor token = torch::empty({rows}, x.options().dtype(torch::kLong));
  torch::Tensor logp = float_rows(x, rows);
  check(dk::sample_unfiltered(kernel_dtype(x), x.data_ptr(), t.data_ptr<float>(), u.data_ptr<double>(),
                              token.data_ptr<int64_t>(), logp.data_ptr<float>(), rows, x.size(1), stream_of(x)),
        "sample_unfiltered");
  return {token, logp};
}

namespace {

// std::optional from LibTorch 2.0, c10::optional before.
using MaybeOperator = decltype(c10::Dispatcher::singleton().findSchema(c10::OperatorName("", "")));

// The arguments flash_varlen() passes by name.
bool known_flash_argument(const std::string& name) {
  for (const char* known : {"query", "key", "value", "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p",
                            "is_causal", "return_debug_mask", "seqused_k"})
    if (name == known) return true;
  return false;
}

// The op, where it has seqused_k and every argument without a default is one flash_varlen() knows.
const MaybeOperator& flash_op() {
  static const MaybeOperator op = []() -> MaybeOperator {
    MaybeOperator found = c10::Dispatcher::singleton().findSchema({"aten::_flash_attention_forward", ""});
    if (!found) return MaybeOperator();
    bool has_seqused_k = false;
    for (const c10::Argument& a : found->schema().arguments()) {
      if (a.name() == "seqused_k") has_seqused_k = true;
      if (!a.default_value() && !known_flash_argument(a.name())) return MaybeOperator();
    }
    return has_seqused_k ? found : MaybeOperator();
  }();
  return op;
}

// FlashAttention's variable-length forward through the dispatcher, its arguments matched by name
// against the schema of the LibTorch at hand: the op's C++ signature has grown across releases
// (seqused_k, window sizes, alibi slopes), and any argument this code does not know has a default.
// Undefined where flash_op() found no usable op.
torch::Tensor flash_varlen(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& query_offsets, const torch::Tensor& key_offsets, int64_t max_q,
                           int64_t max_k, const torch::Tensor& keys_used, bool causal) {
  const auto& op = flash_op();
  if (!op) return {};
  std::vector<c10::IValue> stack;
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
    else if (name == "is_causal") stack.emplace_back(causal);
    else if (name == "return_debug_mask") stack.emplace_back(false);
    else if (name == "seqused_k") stack.emplace_back(keys_used);
    else stack.push_back(*a.default_value());  // flash_op() checked that it has one
  }
  op->callBoxed(&stack);
  return stack.front().toTensor();
}

}  // namespace

bool varlen_decode_attention_available() { return flash_op().has_value(); }

SlotAttention fused_slot_attention(const SlotLayout& layout, size_t layer, const torch::Tensor& qkv, int64_t heads,
                                   const torch::Tensor& q_norm, const torch::Tensor& k_norm, const torch::Tensor& cos,
                                   const torch::Tensor& sin, double eps, bool group_major) {
  SlotKVCache& cache = *layout.cache;
  torch::Tensor& key_cache = cache.keys[layer];
  torch::Tensor& value_cache = cache.values[layer];
  const int64_t rows = qkv.size(0), length = qkv.size(1), kv_heads = key_cache.size(2), dim = key_cache.size(3);
  if (qkv.size(2) != (heads + 2 * kv_heads) * dim || qkv.scalar_type() != key_cache.scalar_type())
    fail("fused_slot_attention: qkv {} {} does not hold {} query and {} key/value heads of {} values in the cache's {}",
         c10::toString(qkv.scalar_type()), c10::str(qkv.sizes()), heads, kv_heads, dim,
         c10::toString(key_cache.scalar_type()));
  const bool half_precision = qkv.scalar_type() == torch::kHalf || qkv.scalar_type() == torch::kBFloat16;
  const bool flash = layout.keys_used.defined() && half_precision && dim % 8 == 0 && dim <= 256 &&
                     varlen_decode_attention_available();
  const int64_t groups = heads / kv_heads;
  SlotAttention result;
  result.group_major = flash && length == 1 && groups > 1 && group_major && layout.grouped_query_offsets.defined();
  // The cache [slots + 1, capacity, Hkv, D] is already the packed [total, Hkv, D] key layout of
  // the variable-length kernel: row b's keys start at slot[b] * capacity and it reads the first
  // start[b] + count[b] of them, its own new ones (written here) last.
  const torch::Tensor input = qkv.contiguous();
  const torch::Tensor c = cos.to(qkv.scalar_type()).contiguous(), s = sin.to(qkv.scalar_type()).contiguous();
  if (c.numel() != rows * length * dim / 2)
    fail("fused kernels: cos has {} values, {} tokens of head_dim {} need {}", c.numel(), rows * length, dim,
         rows * length * dim / 2);
  torch::Tensor q = torch::empty({rows * length, heads, dim}, qkv.options());
  check(dk::qkv_rotary_store(kernel_dtype(qkv), input.data_ptr(), data_or_null(q_norm), data_or_null(k_norm),
                             c.data_ptr(), s.data_ptr(), q.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(),
                             layout.write_index.data_ptr<int64_t>(), rows * length, heads, kv_heads, dim, float(eps),
                             result.group_major, stream_of(qkv)),
        "qkv_rotary_store");
  if (flash) {
    const torch::Tensor keys = key_cache.view({-1, kv_heads, dim}), values = value_cache.view({-1, kv_heads, dim});
    torch::Tensor out;
    if (result.group_major) {
      // Each token's query heads as `groups` query rows of kv_heads heads, all of them seeing the
      // row's keys (no causal mask): what the kernel does itself for one query a row
      // (seqlenq_ngroups_swapped), without its two transposing copies.
      out = flash_varlen(q.view({rows * groups, kv_heads, dim}), keys, values, layout.grouped_query_offsets,
                         layout.key_offsets, groups, layout.batch->read_width, layout.keys_used, /*causal=*/false);
    } else {
      // Queries are the rows' real tokens, packed; causal alignment is bottom-right (query t sees
      // keys up to start[b] + t), which is what the cache holds. Idle decode rows (count 0) read
      // one key; their outputs are ignored.
      const torch::Tensor queries = length == 1 ? q : q.index_select(0, layout.real_tokens);
      out = flash_varlen(queries, keys, values, layout.query_offsets, layout.key_offsets, layout.longest_count,
                         layout.batch->read_width, layout.keys_used, /*causal=*/length > 1);
    }
    if (length == 1) {
      result.out = out.reshape({rows, 1, heads * dim});
      return result;
    }
    torch::Tensor padded = torch::zeros({rows * length, heads * dim}, out.options());
    padded.index_copy_(0, layout.real_tokens, out.reshape({-1, heads * dim}));
    result.out = padded.view({rows, length, heads * dim});
    return result;
  }
  const auto [k, v] = slot_rows(layout, layer);
  const torch::Tensor queries = q.view({rows, length, heads, dim}).transpose(1, 2);
  result.out = grouped_attention(queries, k, v, layout.attend).transpose(1, 2).reshape({rows, length, -1});
  return result;
}

torch::Tensor fused_silu_mul_merged(const torch::Tensor& gate_up) {
  const torch::Tensor x = gate_up.contiguous();
  const int64_t width = x.size(-1) / 2;
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = width;
  torch::Tensor out = torch::empty(sizes, x.options());
  check(dk::silu_mul_merged(kernel_dtype(x), x.data_ptr(), out.data_ptr(), x.numel() / x.size(-1), width, stream_of(x)),
        "silu_mul_merged");
  return out;
}

}  // namespace turnrl::detail
