#include "turnrl/model/transformer.h"

#include <cmath>
#include <limits>

#include <torch/nn/init.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>

#include "decoder_parts.h"
#include "module_state.h"
#include "turnrl/core/error.h"
#include "turnrl/model/rope.h"

namespace turnrl {

int64_t TransformerOptions::num_parameters() const {
  const int64_t d = d_model_, f = ffn_width();
  const int64_t per_block = 4 * d * d + 3 * d * f + 2 * d;
  return vocab_ * d + layers_ * per_block + d + d * vocab_;
}

double TransformerOptions::forward_flops_per_token(double attended) const {
  const double d = double(d_model_), f = double(ffn_width());
  const double matmul_params = double(layers_) * (4 * d * d + 3 * d * f) + d * double(vocab_);
  // QK^T and attention-weighted V: 2 * d multiply-adds per attended key per layer.
  return 2 * matmul_params + 4 * double(layers_) * d * attended;
}

void validate(const TransformerOptions& o) {
  if (o.vocab() < 1) fail("transformer.vocab: {}; must be >= 1", o.vocab());
  if (o.d_model() < 2) fail("transformer.d_model: {}; must be >= 2", o.d_model());
  if (o.layers() < 1) fail("transformer.layers: {}; must be >= 1", o.layers());
  if (o.heads() < 1 || o.d_model() % o.heads() != 0 || o.head_dim() % 2 != 0)
    fail("transformer.heads: {}; must divide d_model ({}) into an even head size (rotary)", o.heads(), o.d_model());
  if (o.ffn() < 0) fail("transformer.ffn: {}; must be >= 0 (0 = 8/3 d_model)", o.ffn());
  if (o.max_seq() < 1) fail("transformer.max_seq: {}; must be >= 1", o.max_seq());
  if (!(o.rope_theta() > 0)) fail("transformer.rope_theta: {}; must be > 0", o.rope_theta());
  if (!(o.norm_eps() > 0)) fail("transformer.norm_eps: {}; must be > 0", o.norm_eps());
  if (o.dtype() != torch::kFloat && o.dtype() != torch::kBFloat16)
    fail("transformer.dtype: {}; allowed: float32, bfloat16", c10::toString(o.dtype()));
}

namespace detail {

// Pre-norm block: x + attn(norm(x)), then x + swiglu(norm(x)).
class DecoderBlock : public torch::nn::Module {
 public:
  DecoderBlock(const TransformerOptions& o) : options_(o) {
    const int64_t d = o.d_model(), f = o.ffn_width();
    attn_norm_ = register_parameter("attn_norm", torch::ones({d}));
    qkv_ = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(d, 3 * d).bias(false)));
    out_ = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(false)));
    mlp_norm_ = register_parameter("mlp_norm", torch::ones({d}));
    gate_up_ = register_module("gate_up", torch::nn::Linear(torch::nn::LinearOptions(d, 2 * f).bias(false)));
    down_ = register_module("down", torch::nn::Linear(torch::nn::LinearOptions(f, d).bias(false)));
  }

  void init_weights(double std) {
    const double residual_std = std / std::sqrt(2.0 * double(options_.layers()));
    torch::nn::init::normal_(qkv_->weight, 0.0, std);
    torch::nn::init::normal_(gate_up_->weight, 0.0, std);
    torch::nn::init::normal_(out_->weight, 0.0, residual_std);
    torch::nn::init::normal_(down_->weight, 0.0, residual_std);
  }

  torch::Tensor forward(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& mask,
                        KVCache* cache, size_t layer) {
    const int64_t batch = x.size(0), length = x.size(1), heads = options_.heads(), head_dim = options_.head_dim();
    const auto qkv = qkv_(rms_norm(x, attn_norm_, options_.norm_eps()))
                         .view({batch, length, 3, heads, head_dim})
                         .permute({2, 0, 3, 1, 4})
                         .unbind(0);  // 3 x [B, H, T, D]
    const torch::Tensor q = apply_rotary(qkv[0], cos, sin);
    torch::Tensor k = apply_rotary(qkv[1], cos, sin), v = qkv[2];
    if (cache) {
      std::tie(k, v) = append_to_cache(*cache, layer, k, v);
    }
    const torch::Tensor a = attention(q, k, v, mask).transpose(1, 2).reshape({batch, length, heads * head_dim});
    x = x + out_(a);
    const auto gate_up = gate_up_(rms_norm(x, mlp_norm_, options_.norm_eps())).chunk(2, -1);
    return x + down_(torch::silu(gate_up[0]) * gate_up[1]);
  }

 private:
  TransformerOptions options_;
  torch::Tensor attn_norm_, mlp_norm_;
  torch::nn::Linear qkv_{nullptr}, out_{nullptr}, gate_up_{nullptr}, down_{nullptr};
};

}  // namespace detail

TransformerImpl::TransformerImpl(const TransformerOptions& options) : options_(options) {
  validate(options_);
  RopeSettings rope;
  rope.theta = options_.rope_theta();
  inv_freq_ = rope_inverse_frequencies(rope, options_.head_dim());
  const int64_t d = options_.d_model();
  embed_ = register_module("embed", torch::nn::Embedding(options_.vocab(), d));
  for (int64_t i = 0; i < options_.layers(); ++i)
    blocks_.push_back(register_module("block" + std::to_string(i), std::make_shared<detail::DecoderBlock>(options_)));
  final_norm_ = register_parameter("final_norm", torch::ones({d}));
  head_ = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(d, options_.vocab()).bias(false)));

  constexpr double kInitStd = 0.02;  // GPT-2 / LLaMA initialisation
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(embed_->weight, 0.0, kInitStd);
  torch::nn::init::normal_(head_->weight, 0.0, kInitStd);
  for (auto& block : blocks_) block->init_weights(kInitStd);
  torch::nn::Module::to(options_.dtype());
}

void TransformerImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  torch::nn::Module::to(device, dtype, non_blocking);
  options_.dtype(dtype);
}

void TransformerImpl::to(torch::Dtype dtype, bool non_blocking) {
  torch::nn::Module::to(dtype, non_blocking);
  options_.dtype(dtype);
}

KVCache TransformerImpl::make_cache(int64_t batch, int64_t capacity) const {
  if (capacity > options_.max_seq())
    fail("KV cache: capacity {} exceeds transformer.max_seq {}", capacity, options_.max_seq());
  return KVCache::empty(options_.layers(), batch, options_.heads(), capacity, options_.head_dim(),
                        embed_->weight.options());
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                       KVCache* cache) {
  const int64_t past = cache ? cache->length : 0;
  if (tokens.dim() == 2 && past + tokens.size(1) > options_.max_seq())
    fail("transformer: sequence length {} exceeds transformer.max_seq {}", past + tokens.size(1), options_.max_seq());
  const detail::AttentionLayout layout = detail::attention_layout(tokens, attention_mask, cache);
  const auto [cos, sin] = detail::rotary_angles(layout.positions, inv_freq_);
  torch::Tensor x = embed_(tokens);
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward(x, cos, sin, layout.attend, cache, i);
  torch::Tensor logits = head_(detail::rms_norm(x, final_norm_, options_.norm_eps()));
  if (cache) detail::advance(*cache, layout);
  return logits;
}

// ---- TransformerPolicy ----

namespace {

constexpr const char* kOptionsKey = "turnrl_transformer_options";
constexpr const char* kFloatOptionsKey = "turnrl_transformer_float_options";

void write_options(torch::serialize::OutputArchive& archive, const TransformerOptions& o) {
  archive.write(kOptionsKey, torch::tensor(std::vector<int64_t>{o.vocab(), o.d_model(), o.layers(), o.heads(),
                                                                o.ffn_width(), o.max_seq(), int64_t(o.dtype())},
                                                  torch::kLong));
  archive.write(kFloatOptionsKey, torch::tensor(std::vector<double>{o.rope_theta(), o.norm_eps()}, torch::kDouble));
}

TransformerOptions read_options(torch::serialize::InputArchive& archive, const std::string& path) {
  torch::Tensor ints, floats;
  if (!archive.try_read(kOptionsKey, ints) || !archive.try_read(kFloatOptionsKey, floats))
    fail("TransformerPolicy: '{}' holds no transformer options; was it written by TransformerPolicy::save?", path);
  ints = ints.to(torch::kCPU, torch::kLong);
  floats = floats.to(torch::kCPU, torch::kDouble);
  const auto i = ints.accessor<int64_t, 1>();
  const auto f = floats.accessor<double, 1>();
  return TransformerOptions()
      .vocab(i[0]).d_model(i[1]).layers(i[2]).heads(i[3]).ffn(i[4]).max_seq(i[5])
      .dtype(torch::Dtype(i[6])).rope_theta(f[0]).norm_eps(f[1]);
}

torch::serialize::InputArchive open_archive(const std::string& path, torch::Device device) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, device);
  } catch (const c10::Error& e) {
    fail("TransformerPolicy: cannot read '{}': {}", path, e.what_without_backtrace());
  }
  return archive;
}

}  // namespace

TransformerPolicy::TransformerPolicy(const TransformerOptions& options, torch::Device device)
    : model_(options), device_(device) {
  model_->to(device);
}

std::unique_ptr<TransformerPolicy> TransformerPolicy::from_file(const std::string& path, torch::Device device) {
  torch::serialize::InputArchive archive = open_archive(path, device);
  auto policy = std::make_unique<TransformerPolicy>(read_options(archive, path), device);
  detail::copy_module_state(*policy->model_, archive, path);
  return policy;
}

TokenLogp TransformerPolicy::forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                          const torch::Tensor& response_mask) {
  if (attention_mask.defined() && attention_mask.sizes() != tokens.sizes())
    fail("forward_logp: attention_mask has shape {}, tokens {}; they must match", c10::str(attention_mask.sizes()),
         c10::str(tokens.sizes()));
  return token_logp_from_logits(model_->forward(tokens, attention_mask), tokens, response_mask, logp_temperature());
}

Rollout TransformerPolicy::generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                                    const SamplingOptions& options) {
  validate(options);
  const int64_t capacity = prompts.size(1) + options.max_new_tokens;
  if (capacity > this->options().max_seq())
    fail("sampling.max_new_tokens: prompt length {} + max_new_tokens {} = {} exceeds transformer.max_seq {}",
         prompts.size(1), options.max_new_tokens, capacity, this->options().max_seq());
  torch::NoGradGuard no_grad;
  if (options.use_cache) {
    Transformer model = model_;
    detail::CachedNextToken next(
        [model](const torch::Tensor& t, const torch::Tensor& m, KVCache* cache) mutable { return model->forward(t, m, cache); },
        [model](int64_t batch, int64_t capacity) { return model->make_cache(batch, capacity); }, capacity);
    return sample(next, prompts, prompt_mask, options);
  }
  Transformer model = model_;
  RecomputeNextToken next(
      [model](const torch::Tensor& t, const torch::Tensor& m) mutable { return model->forward(t, m); });
  return sample(next, prompts, prompt_mask, options);
}

void TransformerPolicy::save(const std::string& path) {
  torch::serialize::OutputArchive archive;
  model_->save(archive);
  write_options(archive, options());
  archive.save_to(path);
}

void TransformerPolicy::load(const std::string& path) {
  torch::serialize::InputArchive archive = open_archive(path, device_);
  const TransformerOptions stored = read_options(archive, path);
  const TransformerOptions& mine = options();
  const std::pair<const char*, std::pair<int64_t, int64_t>> shape[] = {
      {"vocab", {stored.vocab(), mine.vocab()}},     {"d_model", {stored.d_model(), mine.d_model()}},
      {"layers", {stored.layers(), mine.layers()}},  {"heads", {stored.heads(), mine.heads()}},
      {"ffn", {stored.ffn_width(), mine.ffn_width()}}};
  for (const auto& [field, values] : shape)
    if (values.first != values.second)
      fail("TransformerPolicy.load: '{}' has transformer.{} = {}, this policy {}", path, field, values.first,
           values.second);
  detail::copy_module_state(*model_, archive, path);
}

void TransformerPolicy::to(torch::Device device) {
  model_->to(device);
  device_ = device;
}

void TransformerPolicy::to(torch::Dtype dtype) { model_->to(dtype); }

}  // namespace turnrl
