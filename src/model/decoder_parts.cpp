#include "decoder_parts.h"

#include <cmath>
#include <limits>

#include <torch/version.h>

#include "turnrl/core/error.h"
#include "fp8_e4m3.h"
#include "turnrl/model/policy.h"

#define TURNRL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace turnrl {

KVCache KVCache::empty(int64_t layers, int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                       const torch::TensorOptions& like) {
  KVCache cache;
  for (int64_t i = 0; i < layers; ++i) {
    cache.keys.push_back(torch::zeros({batch, kv_heads, capacity, head_dim}, like));
    cache.values.push_back(torch::zeros({batch, kv_heads, capacity, head_dim}, like));
  }
  cache.key_mask = torch::zeros({batch, capacity}, like.dtype(torch::kBool));
  cache.valid_count = torch::zeros({batch}, like.dtype(torch::kLong));
  return cache;
}

SlotKVCache SlotKVCache::empty(int64_t layers, int64_t slots, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                               const torch::TensorOptions& like, KVCacheDtype storage) {
  if (layers < 1 || slots < 1 || capacity < 1)
    fail("SlotKVCache: {} layers, {} slots, capacity {}; each must be >= 1", layers, slots, capacity);
  SlotKVCache cache;
  cache.fp8_decodes_to = c10::typeMetaToScalarType(like.dtype());
  // Code 0 is +0.0: a zeroed fp8 cache holds zeros, as the model-dtype one does.
  const torch::TensorOptions held = storage == KVCacheDtype::fp8_e4m3 ? like.dtype(torch::kByte) : like;
  for (int64_t i = 0; i < layers; ++i) {
    cache.keys.push_back(torch::zeros({slots + 1, capacity, kv_heads, head_dim}, held));
    cache.values.push_back(torch::zeros({slots + 1, capacity, kv_heads, head_dim}, held));
  }
  return cache;
}

namespace detail {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const torch::Tensor xf = x.to(torch::kFloat);
  return weight * (xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> rotary_angles(const torch::Tensor& positions, const torch::Tensor& inv_freq) {
  const torch::Tensor angles = positions.to(torch::kFloat).unsqueeze(-1) * inv_freq.to(positions.device());
  return {angles.cos().unsqueeze(1), angles.sin().unsqueeze(1)};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto half = x.size(-1) / 2;
  const torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1).to(x.scalar_type());
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask) {
  const int64_t groups = q.size(1) / k.size(1);
#if TURNRL_TORCH_AT_LEAST(2, 5)
  if (!mask.defined())
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, groups > 1);
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/false, std::nullopt, groups > 1);
#else
  // repeat_kv: key/value head j serves query heads j * groups .. (j + 1) * groups - 1.
  const torch::Tensor keys = groups > 1 ? k.repeat_interleave(groups, 1) : k;
  const torch::Tensor values = groups > 1 ? v.repeat_interleave(groups, 1) : v;
#if TURNRL_TORCH_AT_LEAST(2, 0)
  if (!mask.defined()) return at::scaled_dot_product_attention(q, keys, values, {}, 0.0, /*is_causal=*/true);
  return at::scaled_dot_product_attention(q, keys, values, mask, 0.0, /*is_causal=*/false);
#else
  const torch::Tensor scores = torch::matmul(q, keys.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(-1))));
  const torch::Tensor allowed =
      mask.defined() ? mask : torch::ones({q.size(2), k.size(2)}, q.options().dtype(torch::kBool)).tril();
  const torch::Tensor probs =
      scores.to(torch::kFloat).masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity()).softmax(-1);
  return torch::matmul(probs.to(q.scalar_type()), values);
#endif
#endif
}

AttentionLayout attention_layout(const torch::Tensor& tokens, const torch::Tensor& attention_mask, KVCache* cache) {
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong)
    fail("decoder: tokens must be int64 [B, T]; got {} {}", c10::toString(tokens.scalar_type()),
         c10::str(tokens.sizes()));
  if (attention_mask.defined() && attention_mask.sizes() != tokens.sizes())
    fail("decoder: attention_mask has shape {}, tokens {}; they must match", c10::str(attention_mask.sizes()),
         c10::str(tokens.sizes()));
  const int64_t length = tokens.size(1), past = cache ? cache->length : 0;
  if (cache && past + length > cache->capacity())
    fail("KV cache: {} tokens do not fit ({} cached, capacity {})", length, past, cache->capacity());
  const auto index_options = torch::TensorOptions(torch::kLong).device(tokens.device());

  AttentionLayout layout;
  torch::Tensor mask;
  if (attention_mask.defined()) {
    mask = attention_mask.to(torch::kBool);
    if (!cache) {
      const bool holes =
          mask.narrow(1, 1, length - 1).logical_and(mask.narrow(1, 0, length - 1).logical_not()).any().item<bool>();
      if (!holes) mask = torch::Tensor();
    }
  }
  if (!mask.defined() && !cache) {
    layout.positions = torch::arange(length, index_options).unsqueeze(0).expand({tokens.size(0), length});
    return layout;
  }
  if (!mask.defined()) mask = torch::ones_like(tokens, torch::kBool);
  layout.valid = mask;
  layout.positions = positions_from_mask(mask);
  torch::Tensor key_mask = mask;
  if (cache) {
    layout.positions = (layout.positions + cache->valid_count.unsqueeze(1)).masked_fill(mask.logical_not(), 0);
    cache->key_mask.narrow(1, past, length).copy_(mask);
    key_mask = cache->key_mask.narrow(1, 0, past + length);
  }
  const torch::Tensor query_index = torch::arange(past, past + length, index_options).unsqueeze(1);
  const torch::Tensor key_index = torch::arange(past + length, index_options).unsqueeze(0);
  // A query always sees itself, so padding rows never soften over an empty set (no NaN).
  layout.attend =
      key_mask.unsqueeze(1).unsqueeze(1).logical_and(key_index.le(query_index)).logical_or(key_index.eq(query_index));
  return layout;
}

void advance(KVCache& cache, const AttentionLayout& layout) {
  cache.length += layout.valid.size(1);
  cache.valid_count += layout.valid.to(torch::kLong).sum(1);
}

std::pair<torch::Tensor, torch::Tensor> append_to_cache(KVCache& cache, size_t layer, const torch::Tensor& k,
                                                        const torch::Tensor& v) {
  const int64_t length = k.size(2);
  cache.keys[layer].narrow(2, cache.length, length).copy_(k);
  cache.values[layer].narrow(2, cache.length, length).copy_(v);
  return {cache.keys[layer].narrow(2, 0, cache.length + length), cache.values[layer].narrow(2, 0, cache.length + length)};
}

SlotLayout slot_layout(const torch::Tensor& tokens, const SlotBatch& batch, SlotKVCache& cache) {
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong)
    fail("decoder: tokens must be int64 [B, T]; got {} {}", c10::toString(tokens.scalar_type()),
         c10::str(tokens.sizes()));
  const int64_t rows = tokens.size(0), length = tokens.size(1), capacity = cache.capacity();
  for (const torch::Tensor* t : {&batch.slot, &batch.start, &batch.count})
    if (!t->defined() || t->dim() != 1 || t->size(0) != rows || t->scalar_type() != torch::kLong)
      fail("SlotBatch: slot, start and count must be int64 [{}] (one per row of tokens)", rows);
  if (batch.read_width < 1 || batch.read_width > capacity)
    fail("SlotBatch.read_width: {}; must be in [1, {}] (the cache capacity)", batch.read_width, capacity);
  if (batch.leading_slots && rows > cache.slots())
    fail("SlotBatch.leading_slots: {} rows but the cache has {} slots", rows, cache.slots());
  const auto index_options = torch::TensorOptions(torch::kLong).device(tokens.device());
  const torch::Tensor step = torch::arange(length, index_options).unsqueeze(0);
  SlotLayout layout;
  layout.cache = &cache;
  layout.batch = &batch;
  layout.positions = batch.start.unsqueeze(1) + step;
  const torch::Tensor real = step < batch.count.unsqueeze(1);
  // Padding tokens go to distinct positions of the scratch row (no two writes to one place).
  const torch::Tensor scratch = cache.slots() * capacity + (torch::arange(rows * length, index_options) % capacity);
  layout.write_index =
      torch::where(real, batch.slot.unsqueeze(1) * capacity + layout.positions, scratch.view({rows, length})).view(-1);
  const torch::Tensor key_index = torch::arange(batch.read_width, index_options);
  layout.attend = key_index.view({1, 1, -1}).le(layout.positions.unsqueeze(-1)).unsqueeze(1);
  if (batch.fused_kernels && tokens.is_cuda()) {
    const auto int32 = index_options.dtype(torch::kInt);
    layout.key_offsets =
        torch::cat({(batch.slot * capacity).to(torch::kInt), torch::full({1}, (cache.slots() + 1) * capacity, int32)});
    layout.keys_used = (batch.start + batch.count).clamp_min(1).to(torch::kInt);
    if (length == 1) {
      layout.query_offsets = torch::arange(rows + 1, int32);
      layout.longest_count = 1;
    } else {
      // Prefill calls are not captured: reading the counts on the host is allowed here.
      layout.query_offsets = torch::cat({torch::zeros({1}, int32), batch.count.cumsum(0).to(torch::kInt)});
      layout.real_tokens = real.view(-1).nonzero().squeeze(1);
      layout.longest_count = batch.count.max().item<int64_t>();
      layout.padded = layout.real_tokens.size(0) != rows * length;
      if (cache.fp8()) {
        const torch::Tensor used = layout.keys_used.to(torch::kLong), ends = used.cumsum(0);
        const int64_t total = ends[-1].item<int64_t>();
        const torch::Tensor row_of = torch::repeat_interleave(torch::arange(rows, index_options), used, 0, total);
        layout.decoded_rows = batch.slot.index_select(0, row_of) * capacity +
                              (torch::arange(total, index_options) - (ends - used).index_select(0, row_of));
        layout.decoded_key_offsets = torch::cat({torch::zeros({1}, index_options), ends}).to(torch::kInt);
      }
    }
  }
  return layout;
}

std::pair<torch::Tensor, torch::Tensor> slot_rows(const SlotLayout& layout, size_t layer) {
  const SlotBatch& batch = *layout.batch;
  const SlotKVCache& cache_of = *layout.cache;
  const auto rows = [&](const torch::Tensor& cache) {
    const torch::Tensor slots =
        batch.leading_slots ? cache.narrow(0, 0, batch.slot.size(0)) : cache.index_select(0, batch.slot);
    const torch::Tensor read = slots.narrow(1, 0, batch.read_width);
    // fp8 codes: the values they hold, in the model's dtype (a copy of the rows read).
    return (cache_of.fp8() ? from_e4m3(read, cache_of.model_dtype()) : read).transpose(1, 2);
  };
  return {rows(layout.cache->keys[layer]), rows(layout.cache->values[layer])};
}

std::pair<torch::Tensor, torch::Tensor> store_in_slots(const SlotLayout& layout, size_t layer, const torch::Tensor& k,
                                                       const torch::Tensor& v) {
  // [B, Hkv, T, D] -> token-major [B * T, Hkv, D] (token i to row write_index[i] of the flattened
  // cache), as e4m3 codes where the cache holds codes.
  const bool fp8 = layout.cache->fp8();
  const auto store = [&](torch::Tensor& cache, const torch::Tensor& x) {
    const torch::Tensor tokens = x.transpose(1, 2).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
    cache.view({-1, x.size(1), x.size(3)}).index_copy_(0, layout.write_index, fp8 ? to_e4m3(tokens) : tokens);
  };
  store(layout.cache->keys[layer], k);
  store(layout.cache->values[layer], v);
  return slot_rows(layout, layer);
}

torch::Tensor group_major_columns(int64_t heads, int64_t kv_heads, int64_t dim) {
  if (kv_heads < 1 || heads % kv_heads != 0)
    fail("group_major_columns: {} query heads do not split into groups of {} key/value heads", heads, kv_heads);
  const int64_t groups = heads / kv_heads;
  // place p = i * kv_heads + j holds head j * groups + i.
  const torch::Tensor place = torch::arange(heads, torch::kLong);
  const torch::Tensor head = (place % kv_heads) * groups + place.div(kv_heads, "floor");
  return (head.unsqueeze(1) * dim + torch::arange(dim, torch::kLong).unsqueeze(0)).view(-1);
}

torch::Tensor grouped_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& mask) {
  const int64_t rows = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k.size(1), groups = heads / kv_heads, width = k.size(2);
  // Query head h = j * groups + i is served by key/value head j (transformers' repeat_kv).
  const torch::Tensor folded_q = q.reshape({rows, kv_heads, groups * length, dim});
  const torch::Tensor folded_mask =
      mask.unsqueeze(2).expand({rows, 1, groups, length, width}).reshape({rows, 1, groups * length, width});
  // reshape, not view: a fused SDPA kernel (cuDNN on an H100) may return its output in a layout
  // whose head and length dimensions cannot be regrouped without a copy.
  return attention(folded_q, k, v, folded_mask).reshape({rows, heads, length, dim});
}

torch::Tensor CachedNextToken::prefill(const torch::Tensor& prompts, const torch::Tensor& prompt_mask) {
  cache_ = make_cache_(prompts.size(0), capacity_);
  return forward_(prompts, prompt_mask, &cache_).select(1, -1);
}

torch::Tensor CachedNextToken::extend(const torch::Tensor& token, const torch::Tensor& valid) {
  return forward_(token.unsqueeze(1), valid.unsqueeze(1), &cache_).select(1, -1);
}

}  // namespace detail
}  // namespace turnrl
