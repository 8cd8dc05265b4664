#include "fused_decoder.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>

#include "decode_attention.cuh"
#include "decode_gemm.cuh"
#include "decoder_kernels.cuh"
#include "fp8_e4m3.h"
#include "tuned_gemm.h"
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

torch::Tensor flash_decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                     const torch::Tensor& grouped_query_offsets, const torch::Tensor& key_offsets,
                                     const torch::Tensor& keys_used, int64_t max_keys) {
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2), kv_heads = keys.size(1), groups = heads / kv_heads;
  // Each token's query heads as `groups` query rows of kv_heads heads, all of them seeing the
  // row's keys (no causal mask): what the kernel does itself for one query a row
  // (seqlenq_ngroups_swapped), without its two transposing copies.
  const torch::Tensor out = flash_varlen(q.view({rows * groups, kv_heads, dim}), keys, values, grouped_query_offsets,
                                         key_offsets, groups, max_keys, keys_used, /*causal=*/false);
  return out.defined() ? out.view({rows, heads, dim}) : out;
}

namespace {

// FlashAttention's default softmax scale, which flash_varlen() uses.
float softmax_scale(int64_t dim) { return float(1.0 / std::sqrt(double(dim))); }

// The split-KV kernel's output [rows, heads, dim] (like `like`), its split count (splits 0: chosen
// for the GPU) and its workspace.
struct SplitKvRun {
  torch::Tensor out, workspace;
  int splits = 1;
  float* workspace_data() const { return workspace.defined() ? workspace.data_ptr<float>() : nullptr; }
};
SplitKvRun split_kv_run(const torch::Tensor& like, int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim,
                        int64_t max_keys, int64_t splits) {
  if (splits == 0) {
    // LibTorch reads a device's properties once and keeps them: nothing to ask the driver during a capture.
    const int sm_count = at::cuda::getDeviceProperties(like.device().index())->multiProcessorCount;
    splits = dk::decode_attention_splits(rows, kv_heads, max_keys, sm_count);
  }
  SplitKvRun run;
  run.splits = int(splits);
  run.out = torch::empty({rows, heads, dim}, like.options());
  const int64_t workspace_floats = dk::decode_attention_workspace_floats(rows, heads, dim, run.splits);
  if (workspace_floats > 0) run.workspace = torch::empty({workspace_floats}, like.options().dtype(torch::kFloat));
  return run;
}

}  // namespace

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                               const torch::Tensor& key_offsets, const torch::Tensor& keys_used, bool group_major,
                               int64_t max_keys, int64_t splits) {
  if (q.dim() != 3 || !q.is_cuda() || (q.scalar_type() != torch::kHalf && q.scalar_type() != torch::kBFloat16))
    fail("decode_attention: q must be a float16 or bfloat16 CUDA tensor [rows, heads, head_dim]; got {} {} on {}",
         c10::toString(q.scalar_type()), c10::str(q.sizes()), q.device().str());
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  // uint8 keys and values: e4m3 codes (fp8_e4m3.h).
  const bool fp8 = keys.scalar_type() == torch::kByte;
  for (const auto& [name, t] : {std::pair<const char*, const torch::Tensor*>{"keys", &keys}, {"values", &values}})
    if (t->dim() != 3 || t->size(2) != dim || t->scalar_type() != (fp8 ? torch::kByte : q.scalar_type()) ||
        t->device() != q.device() || !t->is_contiguous())
      fail("decode_attention: {} must be contiguous {} [total, kv_heads, {}] on {} (q's dtype, or both uint8 e4m3 "
           "codes; q's head_dim and device); got {} {} on {}{}",
           name, c10::toString(q.scalar_type()), dim, q.device().str(), c10::toString(t->scalar_type()),
           c10::str(t->sizes()), t->device().str(), t->is_contiguous() ? "" : ", not contiguous");
  if (!keys.sizes().equals(values.sizes()))
    fail("decode_attention: keys {} and values {} must have one shape", c10::str(keys.sizes()), c10::str(values.sizes()));
  const int64_t kv_heads = keys.size(1);
  if (kv_heads < 1 || heads % kv_heads != 0)
    fail("decode_attention: q's {} heads do not split into groups of keys' {} kv_heads", heads, kv_heads);
  if (!dk::decode_attention_supports(kernel_dtype(q), dim, heads / kv_heads))
    fail("decode_attention: head_dim {} with {} query heads a key/value head; allowed: head_dim 64, 128 or 256 and "
         "1 to 8 heads a group",
         dim, heads / kv_heads);
  const auto check_index = [&](const char* name, const torch::Tensor& t, int64_t least) {
    if (t.dim() != 1 || t.size(0) < least || t.scalar_type() != torch::kInt || t.device() != q.device() ||
        !t.is_contiguous())
      fail("decode_attention: {} must be a contiguous int32 vector of at least {} entries (one a row of q) on {}; got "
           "{} {} on {}",
           name, least, q.device().str(), c10::toString(t.scalar_type()), c10::str(t.sizes()), t.device().str());
  };
  check_index("key_offsets", key_offsets, rows);
  check_index("keys_used", keys_used, rows);
  if (max_keys < 1) fail("decode_attention: max_keys {}; must be at least 1", max_keys);
  if (splits < 0 || splits > 65535) fail("decode_attention: splits {}; allowed: 0 (chosen for the GPU) to 65535", splits);
  const torch::Tensor query = q.contiguous();
  for (const auto& [name, t] :
       {std::pair<const char*, const torch::Tensor*>{"q", &query}, {"keys", &keys}, {"values", &values}})
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0)
      fail("decode_attention: {} must start 16-byte aligned (the kernel reads 16-byte packs)", name);
  SplitKvRun run = split_kv_run(query, rows, heads, kv_heads, dim, max_keys, splits);
  check(dk::decode_attention(kernel_dtype(q), fp8, query.data_ptr(), keys.data_ptr(), values.data_ptr(),
                             key_offsets.data_ptr<int32_t>(), keys_used.data_ptr<int32_t>(), run.out.data_ptr(),
                             run.workspace_data(), rows, heads, kv_heads, dim, group_major, softmax_scale(dim),
                             run.splits, stream_of(q)),
        "decode_attention");
  return run.out;
}

SlotAttention fused_slot_attention(const SlotLayout& layout, size_t layer, const torch::Tensor& qkv, int64_t heads,
                                   const torch::Tensor& q_norm, const torch::Tensor& k_norm, const torch::Tensor& cos,
                                   const torch::Tensor& sin, double eps, bool group_major) {
  SlotKVCache& cache = *layout.cache;
  torch::Tensor& key_cache = cache.keys[layer];
  torch::Tensor& value_cache = cache.values[layer];
  const int64_t rows = qkv.size(0), length = qkv.size(1), kv_heads = key_cache.size(2), dim = key_cache.size(3);
  if (qkv.size(2) != (heads + 2 * kv_heads) * dim || qkv.scalar_type() != cache.model_dtype())
    fail("fused_slot_attention: qkv {} {} does not hold {} query and {} key/value heads of {} values in the cache's {}",
         c10::toString(qkv.scalar_type()), c10::str(qkv.sizes()), heads, kv_heads, dim,
         c10::toString(cache.model_dtype()));
  const bool half_precision = qkv.scalar_type() == torch::kHalf || qkv.scalar_type() == torch::kBFloat16;
  const int64_t groups = heads / kv_heads;
  // One token a row: the split-KV kernel where it takes the shapes, unless the batch asks for
  // FlashAttention's; FlashAttention's for the other calls.
  const bool split_kv = length == 1 && layout.keys_used.defined() &&
                        layout.batch->decode_attention == DecodeAttention::split_kv &&
                        dk::decode_attention_supports(kernel_dtype(qkv), dim, groups);
  // FlashAttention's kernel reads keys and values in the model's dtype only: over e4m3 codes a
  // prefill gives it a decoded copy of the keys its rows read (SlotLayout::decoded_rows), a decode
  // step reads the codes with the split-KV kernel.
  const bool flash_capable = layout.keys_used.defined() && half_precision && dim % 8 == 0 && dim <= 256 &&
                             varlen_decode_attention_available();
  const bool flash = !split_kv && !cache.fp8() && flash_capable;
  const bool flash_over_decoded = !split_kv && cache.fp8() && layout.decoded_rows.defined() && flash_capable;
  SlotAttention result;
  result.group_major = length == 1 && groups > 1 && group_major &&
                       (split_kv || (flash && layout.grouped_query_offsets.defined()));
  // The cache [slots + 1, capacity, Hkv, D] is already the packed [total, Hkv, D] key layout of
  // the variable-length kernel: row b's keys start at slot[b] * capacity and it reads the first
  // start[b] + count[b] of them, its own new ones (written here) last.
  const torch::Tensor input = qkv.contiguous();
  const torch::Tensor c = cos.to(qkv.scalar_type()).contiguous(), s = sin.to(qkv.scalar_type()).contiguous();
  if (c.numel() != rows * length * dim / 2)
    fail("fused kernels: cos has {} values, {} tokens of head_dim {} need {}", c.numel(), rows * length, dim,
         rows * length * dim / 2);
  if (split_kv && dk::decode_attention_from_qkv_enabled()) {
    // One launch: the kernel norms and rotates the queries and the new keys itself and stores the
    // new keys and values (decode_attention.cuh); the same bits as the two launches below.
    SplitKvRun run = split_kv_run(qkv, rows, heads, kv_heads, dim, layout.batch->read_width, 0);
    dk::FreshTokens fresh;
    fresh.qkv = input.data_ptr();
    fresh.q_weight = data_or_null(q_norm);
    fresh.k_weight = data_or_null(k_norm);
    fresh.cos = c.data_ptr();
    fresh.sin = s.data_ptr();
    fresh.write_index = layout.write_index.data_ptr<int64_t>();
    fresh.keys = key_cache.data_ptr();
    fresh.values = value_cache.data_ptr();
    fresh.eps = float(eps);
    check(dk::decode_attention_from_qkv(kernel_dtype(qkv), cache.fp8(), fresh, layout.key_offsets.data_ptr<int32_t>(),
                                        layout.keys_used.data_ptr<int32_t>(), run.out.data_ptr(), run.workspace_data(),
                                        rows, heads, kv_heads, dim, result.group_major, softmax_scale(dim), run.splits,
                                        stream_of(qkv)),
          "decode_attention_from_qkv");
    result.out = run.out.view({rows, 1, heads * dim});
    return result;
  }
  torch::Tensor q = torch::empty({rows * length, heads, dim}, qkv.options());
  // An fp8 cache: the kernel writes the new keys and values as e4m3 codes (as to_e4m3 rounds them).
  check(dk::qkv_rotary_store(kernel_dtype(qkv), cache.fp8(), input.data_ptr(), data_or_null(q_norm),
                             data_or_null(k_norm), c.data_ptr(), s.data_ptr(), q.data_ptr(), key_cache.data_ptr(),
                             value_cache.data_ptr(), layout.write_index.data_ptr<int64_t>(), rows * length, heads,
                             kv_heads, dim, float(eps), result.group_major, stream_of(qkv)),
        "qkv_rotary_store");
  if (split_kv) {
    // read_width bounds every row's keys and is fixed for a captured graph, as the split count
    // must be.
    const torch::Tensor out =
        decode_attention(q, key_cache.view({-1, kv_heads, dim}), value_cache.view({-1, kv_heads, dim}),
                         layout.key_offsets, layout.keys_used, result.group_major, layout.batch->read_width);
    result.out = out.view({rows, 1, heads * dim});
    return result;
  }
  if (flash || flash_over_decoded) {
    torch::Tensor keys = key_cache.view({-1, kv_heads, dim}), values = value_cache.view({-1, kv_heads, dim});
    torch::Tensor key_offsets = layout.key_offsets;
    if (flash_over_decoded) {
      // The rows' keys and values decoded into the model's dtype and packed (only those read: a
      // prefill's own new keys and any reused prefix, not whole slots as slot_rows() decodes).
      const auto decoded = [&](const torch::Tensor& codes) {
        return from_e4m3(codes.view({-1, kv_heads, dim}).index_select(0, layout.decoded_rows), cache.model_dtype());
      };
      keys = decoded(key_cache);
      values = decoded(value_cache);
      key_offsets = layout.decoded_key_offsets;
    }
    torch::Tensor out;
    if (result.group_major) {
      out = flash_decode_attention(q, keys, values, layout.grouped_query_offsets, key_offsets, layout.keys_used,
                                   layout.batch->read_width);
    } else {
      // Queries are the rows' real tokens, packed; causal alignment is bottom-right (query t sees
      // keys up to start[b] + t), which is what the cache holds. Idle decode rows (count 0) read
      // one key; their outputs are ignored.
      // Without padding the real tokens are all of them, in order: no gather here, no scatter below.
      const torch::Tensor queries = length == 1 || !layout.padded ? q : q.index_select(0, layout.real_tokens);
      out = flash_varlen(queries, keys, values, layout.query_offsets, key_offsets, layout.longest_count,
                         layout.batch->read_width, layout.keys_used, /*causal=*/length > 1);
    }
    if (length == 1 || !layout.padded) {
      result.out = out.reshape({rows, length, heads * dim});
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

torch::Tensor decode_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                            bool decode_step) {
  const auto type = weight.scalar_type();
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  const bool recorded = torch::GradMode::is_enabled() &&
                        (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  const bool takes = !recorded && x.is_cuda() && (type == torch::kHalf || type == torch::kBFloat16) &&
                     x.scalar_type() == type && x.dim() >= 1 && x.size(-1) == in_features && weight.is_contiguous() &&
                     (!bias.defined() || (bias.scalar_type() == type && bias.is_contiguous())) &&
                     dk::decode_linear_supported(kernel_dtype(weight), x.numel() / in_features, out_features,
                                                 in_features);
  const torch::Tensor input = takes ? x.contiguous() : x;
  if (!takes || !dk::aligned16({input.data_ptr(), weight.data_ptr()})) {
    if (decode_step && !recorded && tuned_gemm_enabled()) {
      const torch::Tensor tuned = tuned_linear(x.contiguous(), weight, bias);
      if (tuned.defined()) return tuned;
    }
    return at::linear(x, weight, bias);
  }
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = out_features;
  torch::Tensor out = torch::empty(sizes, x.options());
  check(dk::decode_linear(kernel_dtype(weight), input.data_ptr(), weight.data_ptr(), data_or_null(bias), out.data_ptr(),
                          input.numel() / in_features, out_features, in_features, {}, stream_of(input)),
        "decode_linear");
  return out;
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
