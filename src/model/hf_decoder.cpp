#include "turnrl/model/hf_decoder.h"

#include <map>
#include <set>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "decoder_parts.h"
#include "merged_linear.h"
#ifdef TURNRL_WITH_CUDA
#include "fused_decoder.h"
#endif
#include "turnrl/core/error.h"

namespace turnrl {

namespace detail {
namespace {

// A child module holding one `weight` (RMSNorm scales, the embedding), so that names read
// `<parent>.<name>.weight` as in transformers.
torch::Tensor register_weight(torch::nn::Module& parent, const std::string& name, torch::IntArrayRef sizes,
                              const torch::TensorOptions& options) {
  auto holder = parent.register_module(name, std::make_shared<torch::nn::Module>());
  return holder->register_parameter("weight", torch::empty(sizes, options));
}

}  // namespace

// One decoder layer: self_attn.{q,k,v,o}_proj (+ q_norm, k_norm), mlp.{gate,up,down}_proj,
// input_layernorm, post_attention_layernorm.
struct HFLayer : torch::nn::Module {
  HFLayer(const HFConfig& c, const torch::TensorOptions& o) : config(c) {
    const int64_t hidden = c.hidden_size, q_width = c.num_attention_heads * c.head_dim,
                  kv_width = c.num_key_value_heads * c.head_dim;
    auto attn = register_module("self_attn", std::make_shared<torch::nn::Module>());
    auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
    const auto add = [&](torch::nn::Module& section, const char* name, int64_t in, int64_t out, bool bias) {
      projections.emplace(name, section.register_module(name, LoraLinear(in, out, bias, o)));
    };
    add(*attn, "q_proj", hidden, q_width, c.qkv_bias);
    add(*attn, "k_proj", hidden, kv_width, c.qkv_bias);
    add(*attn, "v_proj", hidden, kv_width, c.qkv_bias);
    add(*attn, "o_proj", q_width, hidden, c.o_bias);
    if (c.qk_norm) {
      q_norm = register_weight(*attn, "q_norm", {c.head_dim}, o);
      k_norm = register_weight(*attn, "k_norm", {c.head_dim}, o);
    }
    add(*mlp, "gate_proj", hidden, c.intermediate_size, c.mlp_bias);
    add(*mlp, "up_proj", hidden, c.intermediate_size, c.mlp_bias);
    add(*mlp, "down_proj", c.intermediate_size, hidden, c.mlp_bias);
    input_norm = register_weight(*this, "input_layernorm", {hidden}, o);
    post_norm = register_weight(*this, "post_attention_layernorm", {hidden}, o);
  }

  // [B, T, heads * D] -> [B, heads, T, D], per-head RMSNorm first where the model has one.
  torch::Tensor split_heads(const torch::Tensor& x, int64_t heads, const torch::Tensor& norm) const {
    torch::Tensor h = x.view({x.size(0), x.size(1), heads, config.head_dim});
    if (norm.defined()) h = rms_norm(h, norm, config.rms_norm_eps);
    return h.transpose(1, 2);
  }

  // With `slots` the keys and values go to the generation engine's cache, else to `cache` (if any).
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& attend,
                        KVCache* cache, size_t index, const SlotLayout* slots = nullptr) {
#ifdef TURNRL_WITH_CUDA
    const bool fused_here = slots ? slots->batch->fused_kernels : fused;
    if (fused_here && fused_kernels_supported(x)) {
      const auto [residual, mlp] = forward_fused(x, {}, cos, sin, attend, cache, index, slots);
      return residual + mlp;
    }
#endif
    const int64_t batch = x.size(0), length = x.size(1);
    const torch::Tensor h = rms_norm(x, input_norm, config.rms_norm_eps);
    const bool merged = merged_for(slots);
    const auto [q_out, k_out, v_out] = project_qkv(h, merged);
    const torch::Tensor q = apply_rotary(split_heads(q_out, config.num_attention_heads, q_norm), cos, sin);
    torch::Tensor k = apply_rotary(split_heads(k_out, config.num_key_value_heads, k_norm), cos, sin);
    torch::Tensor v = split_heads(v_out, config.num_key_value_heads, {});
    torch::Tensor a;
    if (slots) {
      std::tie(k, v) = store_in_slots(*slots, index, k, v);
      a = grouped_attention(q, k, v, slots->attend);
    } else {
      if (cache) std::tie(k, v) = append_to_cache(*cache, index, k, v);
      a = attention(q, k, v, attend);
    }
    a = a.transpose(1, 2).reshape({batch, length, -1});
    x = x + projections.at("o_proj")(a);
    const torch::Tensor m = rms_norm(x, post_norm, config.rms_norm_eps);
    if (merged && gate_up_merged.ready()) {
      const torch::Tensor gate_up = gate_up_merged(m);
      const int64_t width = config.intermediate_size;
      return x + projections.at("down_proj")(torch::silu(gate_up.narrow(-1, 0, width)) * gate_up.narrow(-1, width, width));
    }
    return x + projections.at("down_proj")(torch::silu(projections.at("gate_proj")(m)) * projections.at("up_proj")(m));
  }

  // Whether a call takes the merged copies: the engine's calls that ask for them, without a gradient.
  static bool merged_for(const SlotLayout* slots) {
    return slots && slots->batch->merged_projections && !torch::GradMode::is_enabled();
  }

  // The q, k and v projections of h: through the merged copy's one GEMM where `merged` and it is
  // built (views of its output), else one GEMM each.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> project_qkv(const torch::Tensor& h, bool merged) {
    if (!merged || !qkv_merged.ready())
      return {projections.at("q_proj")(h), projections.at("k_proj")(h), projections.at("v_proj")(h)};
    const torch::Tensor qkv = qkv_merged(h);
    const int64_t q_width = config.num_attention_heads * config.head_dim, kv_width = config.num_key_value_heads * config.head_dim;
    return {qkv.narrow(-1, 0, q_width), qkv.narrow(-1, q_width, kv_width), qkv.narrow(-1, q_width + kv_width, kv_width)};
  }

  // Builds or refreshes the merged copies (merged_linear.h); `group_major_o` also an o_proj copy
  // whose input columns come in group-major head order (fused_decoder.h). `on` false frees them.
  void refresh_merged(bool on, bool group_major_o) {
    const auto part = [this](const char* name) { return projections.at(name).get(); };
    if (!on) {
      qkv_merged.clear();
      gate_up_merged.clear();
      o_group_major.clear();
      return;
    }
    qkv_merged.refresh({part("q_proj"), part("k_proj"), part("v_proj")});
    gate_up_merged.refresh({part("gate_proj"), part("up_proj")});
    if (!group_major_o || config.num_attention_heads == config.num_key_value_heads) {
      o_group_major.clear();
      return;
    }
    if (!o_columns.defined())
      o_columns = group_major_columns(config.num_attention_heads, config.num_key_value_heads, config.head_dim);
    o_group_major.refresh({part("o_proj")}, o_columns);
  }

#ifdef TURNRL_WITH_CUDA
  // forward() through the fused kernels (fused_decoder.h): the same roundings, fewer launches and
  // fewer float32 intermediates. Activations stay [B, T, heads, D] until attention. Returns the
  // residual stream after attention and the MLP's output, not yet added, so that the next layer
  // adds them in the kernel of its input norm: `pending` is the previous layer's MLP output
  // (undefined for the first layer, or when x is complete).
  std::pair<torch::Tensor, torch::Tensor> forward_fused(const torch::Tensor& input, const torch::Tensor& pending,
                                                        const torch::Tensor& cos, const torch::Tensor& sin,
                                                        const torch::Tensor& attend, KVCache* cache, size_t index,
                                                        const SlotLayout* slots) {
    const int64_t batch = input.size(0), length = input.size(1), dim = config.head_dim;
    const double eps = config.rms_norm_eps;
    const auto [x, h] = add_and_norm(input, pending, input_norm);
    torch::Tensor o;
    const bool merged = merged_for(slots);
    if (slots) {
      // One kernel norms, rotates and stores what the q/k/v projections give (as one tensor).
      const torch::Tensor qkv = merged && qkv_merged.ready()
                                    ? decode_linear(h, qkv_merged.weight(), qkv_merged.bias(), length == 1)
                                    : torch::cat({projections.at("q_proj")(h), projections.at("k_proj")(h),
                                                  projections.at("v_proj")(h)},
                                                 -1);
      const SlotAttention a = fused_slot_attention(*slots, index, qkv, config.num_attention_heads, q_norm, k_norm, cos,
                                                   sin, eps, merged && o_group_major.ready());
      o = a.group_major ? decode_linear(a.out, o_group_major.weight(), o_group_major.bias(), length == 1)
                        : projections.at("o_proj")(a.out);
    } else {
      const torch::Tensor q = fused_norm_rotary(
          projections.at("q_proj")(h).view({batch, length, config.num_attention_heads, dim}), q_norm, cos, sin, eps);
      const torch::Tensor k = fused_norm_rotary(
          projections.at("k_proj")(h).view({batch, length, config.num_key_value_heads, dim}), k_norm, cos, sin, eps);
      const torch::Tensor v = projections.at("v_proj")(h).view({batch, length, config.num_key_value_heads, dim});
      torch::Tensor keys = k.transpose(1, 2), values = v.transpose(1, 2);
      if (cache) std::tie(keys, values) = append_to_cache(*cache, index, keys, values);
      o = projections.at("o_proj")(
          attention(q.transpose(1, 2), keys, values, attend).transpose(1, 2).reshape({batch, length, -1}));
    }
    const auto [residual, m] = add_and_norm(x, o, post_norm);
    const torch::Tensor gated =
        merged && gate_up_merged.ready()
            ? fused_silu_mul_merged(decode_linear(m, gate_up_merged.weight(), gate_up_merged.bias(), length == 1))
            : fused_silu_mul(projections.at("gate_proj")(m), projections.at("up_proj")(m));
    LoraLinear& down = projections.at("down_proj");
    return {residual, merged && !down->has_adapter() ? decode_linear(gated, down->weight, down->bias, length == 1)
                                                     : down(gated)};
  }

  // {x + delta, rms_norm(x + delta, weight)} (delta may be undefined: {x, rms_norm(x)}), in one
  // kernel where no gradient is recorded (the one-kernel add + norm has no backward).
  std::pair<torch::Tensor, torch::Tensor> add_and_norm(const torch::Tensor& x, const torch::Tensor& delta,
                                                       const torch::Tensor& weight) const {
    const double eps = config.rms_norm_eps;
    if (!delta.defined()) return {x, fused_rms_norm(x, weight, eps)};
    if (!torch::GradMode::is_enabled()) return fused_add_rms_norm(x, delta, weight, eps);
    const torch::Tensor sum = x + delta;
    return {sum, fused_rms_norm(sum, weight, eps)};
  }
#endif

  bool fused = false;  // HFDecoderImpl::set_fused_kernels: the fused path outside the engine too
  HFConfig config;
  std::map<std::string, LoraLinear> projections;
  torch::Tensor q_norm, k_norm, input_norm, post_norm;
  // The generation engine's merged copies (HFDecoderImpl::refresh_merged_projections).
  MergedLinear qkv_merged, gate_up_merged, o_group_major;
  torch::Tensor o_columns;  // group_major_columns() of this layer's heads
};

// Activation checkpointing of one layer (LibTorch C++ has no torch.utils.checkpoint): the forward
// runs the layer without recording a graph and keeps only its input; the backward re-runs it with
// grad mode on and differentiates that graph. The layer's trainable parameters are inputs of the
// function, so their gradients come back through the outer graph (and reach them even when the
// layer input needs none, e.g. LoRA over a frozen embedding).
struct LayerRecompute : torch::CustomClassHolder {
  explicit LayerRecompute(std::function<torch::Tensor(const torch::Tensor&)> f) : run(std::move(f)) {}
  std::function<torch::Tensor(const torch::Tensor&)> run;
};

struct CheckpointedLayer : torch::autograd::Function<CheckpointedLayer> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, at::TensorList params,
                               std::function<torch::Tensor(const torch::Tensor&)> run) {
    torch::autograd::variable_list saved = {x};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    torch::Tensor y = run(x);  // apply() runs forward with grad mode off
    ctx->saved_data["run"] = c10::IValue::make_capsule(c10::make_intrusive<LayerRecompute>(std::move(run)));
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    // saved_data keeps the capsule (and the function) alive for as long as ctx.
    const auto* recompute = static_cast<const LayerRecompute*>(ctx->saved_data["run"].toCapsule().get());
    torch::autograd::variable_list wanted;  // the inputs whose gradient is needed, in input order
    std::vector<size_t> wanted_index;
    const torch::Tensor x = saved[0].detach().requires_grad_(ctx->needs_input_grad(0));
    for (size_t i = 0; i < saved.size(); ++i)
      if (ctx->needs_input_grad(i)) {
        wanted.push_back(i == 0 ? x : saved[i]);
        wanted_index.push_back(i);
      }
    torch::autograd::variable_list out(saved.size() + 1);  // + the recompute function, no gradient
    if (wanted.empty()) return out;
    torch::Tensor y;
    {
      torch::AutoGradMode grad_mode(true);
      y = recompute->run(x);
    }
    const torch::autograd::variable_list found =
        torch::autograd::grad({y}, wanted, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < wanted.size(); ++k) out[wanted_index[k]] = found[k];
    return out;
  }
};

}  // namespace detail

HFDecoderImpl::HFDecoderImpl(const HFConfig& config, const torch::TensorOptions& options) : config_(config) {
  inv_freq_ = rope_inverse_frequencies(config_.rope, config_.head_dim);
  auto model = register_module("model", std::make_shared<torch::nn::Module>());
  embed_tokens_ = detail::register_weight(*model, "embed_tokens", {config_.vocab_size, config_.hidden_size}, options);
  auto layers = model->register_module("layers", std::make_shared<torch::nn::Module>());
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i)
    layers_.push_back(layers->register_module(std::to_string(i), std::make_shared<detail::HFLayer>(config_, options)));
  final_norm_ = detail::register_weight(*model, "norm", {config_.hidden_size}, options);
  lm_head_ = config_.tie_word_embeddings
                 ? embed_tokens_
                 : detail::register_weight(*this, "lm_head", {config_.vocab_size, config_.hidden_size}, options);
}

HFDecoderImpl::~HFDecoderImpl() = default;

void HFDecoderImpl::set_fused_kernels(bool on) {
  fused_kernels_ = on;
  for (auto& layer : layers_) layer->fused = on;
}

KVCache HFDecoderImpl::make_cache(int64_t batch, int64_t capacity) const {
  return KVCache::empty(config_.num_hidden_layers, batch, config_.num_key_value_heads, capacity, config_.head_dim,
                        embed_tokens_.options());
}

SlotKVCache HFDecoderImpl::make_slot_cache(int64_t slots, int64_t capacity, KVCacheDtype storage) const {
  return SlotKVCache::empty(config_.num_hidden_layers, slots, config_.num_key_value_heads, capacity, config_.head_dim,
                            embed_tokens_.options(), storage);
}

void HFDecoderImpl::refresh_merged_projections() {
  bool group_major_o = false;
#ifdef TURNRL_WITH_CUDA
  const torch::Dtype type = dtype();
  group_major_o = detail::fused_kernels_supported(embed_tokens_) && (type == torch::kHalf || type == torch::kBFloat16) &&
                  detail::varlen_decode_attention_available();
#endif
  for (auto& layer : layers_) layer->refresh_merged(true, group_major_o);
}

void HFDecoderImpl::clear_merged_projections() {
  for (auto& layer : layers_) layer->refresh_merged(false, false);
}

int64_t HFDecoderImpl::merged_placements() const {
  int64_t n = 0;
  for (const auto& layer : layers_)
    n += layer->qkv_merged.placements() + layer->gate_up_merged.placements() + layer->o_group_major.placements();
  return n;
}

torch::Tensor HFDecoderImpl::slot_hidden(const torch::Tensor& tokens, const SlotBatch& batch, SlotKVCache& cache) {
  detail::SlotLayout layout = detail::slot_layout(tokens, batch, cache);
  if (batch.merged_projections && !torch::GradMode::is_enabled()) {
    // Version checks only, unless a parameter changed (and never during a capture: the warm-up
    // calls before it refreshed them).
    refresh_merged_projections();
    const int64_t groups = config_.num_attention_heads / config_.num_key_value_heads;
    if (layout.query_offsets.defined() && tokens.size(1) == 1 && groups > 1)
      layout.grouped_query_offsets = layout.query_offsets * groups;
  }
  if (!inv_freq_on_device_.defined() || inv_freq_on_device_.device() != device()) inv_freq_on_device_ = inv_freq_.to(device());
  auto [cos, sin] = detail::rotary_angles(layout.positions, inv_freq_on_device_);
  cos = cos.to(dtype());
  sin = sin.to(dtype());
  torch::Tensor x = torch::embedding(embed_tokens_, tokens);
#ifdef TURNRL_WITH_CUDA
  if (batch.fused_kernels && detail::fused_kernels_supported(x)) {
    // Each layer's last residual add happens in the next layer's norm kernel (the final norm's for the last).
    torch::Tensor pending;
    for (size_t i = 0; i < layers_.size(); ++i)
      std::tie(x, pending) = layers_[i]->forward_fused(x, pending, cos, sin, {}, nullptr, i, &layout);
    return layers_.back()->add_and_norm(x, pending, final_norm_).second;
  }
#endif
  for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->forward(x, cos, sin, {}, nullptr, i, &layout);
  return detail::rms_norm(x, final_norm_, config_.rms_norm_eps);
}

torch::Tensor HFDecoderImpl::forward(const torch::Tensor& tokens, const torch::Tensor& attention_mask, KVCache* cache,
                                     bool last_position_only) {
  torch::Tensor hidden = final_hidden(tokens, attention_mask, cache);
  if (last_position_only) hidden = hidden.narrow(1, hidden.size(1) - 1, 1);
  return logits(hidden);
}

torch::Tensor HFDecoderImpl::logits(const torch::Tensor& hidden) const { return torch::matmul(hidden, lm_head_.t()); }

torch::Tensor HFDecoderImpl::final_hidden(const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                          KVCache* cache) {
  const detail::AttentionLayout layout = detail::attention_layout(tokens, attention_mask, cache);
  auto [cos, sin] = detail::rotary_angles(layout.positions, inv_freq_);
  // transformers hands cos/sin to the layers in the model dtype.
  cos = cos.to(dtype());
  sin = sin.to(dtype());
  torch::Tensor x = torch::embedding(embed_tokens_, tokens);
  const bool checkpointed = activation_checkpointing_ && !cache && torch::GradMode::is_enabled();
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!checkpointed) {
      x = layers_[i]->forward(x, cos, sin, layout.attend, cache, i);
      continue;
    }
    std::vector<torch::Tensor> trainable;
    for (const auto& p : layers_[i]->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    const std::shared_ptr<detail::HFLayer> layer = layers_[i];
    const torch::Tensor attend = layout.attend;
    // As a TensorList (not a vector) so that apply() counts the parameters as inputs.
    x = detail::CheckpointedLayer::apply(x, at::TensorList(trainable), [layer, cos, sin, attend, i](const torch::Tensor& input) {
      return layer->forward(input, cos, sin, attend, nullptr, i);
    });
  }
  if (cache) detail::advance(*cache, layout);
  return detail::rms_norm(x, final_norm_, config_.rms_norm_eps);
}

void HFDecoderImpl::load_weights(const SafetensorsCheckpoint& checkpoint) {
  std::map<std::string, torch::Tensor> expected;
  for (const auto& p : named_parameters())
    if (p.key().find(".lora_") == std::string::npos) expected.emplace(p.key(), p.value());
  std::vector<std::string> extra;
  std::set<std::string> seen;
  torch::NoGradGuard no_grad;
  for (const std::string& name : checkpoint.names()) {
    const auto it = expected.find(name);
    if (it == expected.end()) {
      // save_pretrained drops a tied head, but some checkpoints keep it; older ones store inv_freq.
      const bool tied_head = name == "lm_head.weight" && config_.tie_word_embeddings;
      const bool rotary_buffer = name.size() >= 9 && name.compare(name.size() - 9, 9, ".inv_freq") == 0;
      if (!tied_head && !rotary_buffer) extra.push_back(name);
      continue;
    }
    const SafetensorsEntry& entry = checkpoint.entry(name);
    if (torch::IntArrayRef(entry.shape) != it->second.sizes())
      fail("checkpoint '{}': tensor '{}' has shape {}, the model ({}) expects {}", checkpoint.file_of(name), name,
           c10::str(torch::IntArrayRef(entry.shape)), config_.architecture, c10::str(it->second.sizes()));
    it->second.copy_(checkpoint.view(name));
    seen.insert(name);
  }
  if (!extra.empty())
    fail("checkpoint '{}': {} tensor(s) the {} model does not have, e.g. '{}'", checkpoint.file_of(extra.front()),
         extra.size(), config_.architecture, extra.front());
  for (const auto& entry : expected)
    if (!seen.count(entry.first))
      fail("checkpoint: tensor '{}' is missing (the {} config expects it)", entry.first, config_.architecture);
}

void HFDecoderImpl::add_lora(const LoraOptions& options) {
  validate(options);
  if (!options.enabled()) return;
  if (lora_.enabled()) fail("LoRA: the model already has adapters");
  for (auto& parameter : parameters()) parameter.set_requires_grad(false);
  for (auto& layer : layers_)
    for (const std::string& name : options.target_modules()) layer->projections.at(name)->add_adapter(options.rank(), options.scale());
  lora_ = options;
}

NamedTensors HFDecoderImpl::merged_state() const {
  std::map<std::string, torch::Tensor> merged;
  for (const auto& m : named_modules())
    if (const auto* linear = dynamic_cast<const LoraLinearImpl*>(m.value().get()))
      merged[m.key() + ".weight"] = linear->merged_weight();
  NamedTensors out;
  for (const auto& p : named_parameters()) {
    if (p.key().find(".lora_") != std::string::npos) continue;
    const auto it = merged.find(p.key());
    out.emplace_back(p.key(), it == merged.end() ? p.value().detach() : it->second);
  }
  return out;
}

NamedTensors HFDecoderImpl::adapter_state() const {
  NamedTensors out;
  for (const auto& p : named_parameters())
    if (p.key().find(".lora_") != std::string::npos) out.emplace_back("base_model.model." + p.key(), p.value().detach());
  return out;
}

}  // namespace turnrl
