// The generation engine's fused GPU kernels (src/model/fused_decoder.h) against the plain LibTorch
// ops they replace (decoder_parts.h), on random data in every dtype they take, and the engine with
// them against the engine without them on a bf16 model. Without a GPU each case says so.
#include <catch2/catch.hpp>

#include "model/decode_attention.cuh"
#include "model/fp8_e4m3.h"
#include "model/fused_decoder.h"
#include "turnrl/model/chunked_logp.h"
#include "model/generation_requests.h"
#include "model/hf_fixtures.h"
#include "model/kernel_switch.h"
#include "turnrl/model/hf_init.h"

using namespace turnrl;
using namespace turnrl::test;

namespace {

// max |a - b| over max |b|: one rounding of the model dtype is at most 2^-8 (bfloat16), 2^-11
// (float16) of a value; a wrong kernel is off by the values themselves.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return max_abs_diff(a, b) / b.to(torch::kFloat).abs().max().item<double>();
}

// Two roundings of the dtype (a float32 sum order can move a value across one rounding boundary,
// and the next op's rounding can add another).
double two_roundings(torch::Dtype dtype) {
  return dtype == torch::kBFloat16 ? 1.0 / 64 : dtype == torch::kHalf ? 1.0 / 512 : 2e-6;
}

const std::vector<torch::Dtype> kDtypes = {torch::kFloat, torch::kHalf, torch::kBFloat16};

// How two engines' results for the same requests agree: the tokens alike from each request's start
// up to its first difference, out of the tokens compared (the shorter result's), and the largest
// log-prob gap over the alike ones.
struct Agreement {
  int64_t same = 0, compared = 0;
  double gap = 0;
};
Agreement agreement(const std::vector<GenerationResult>& a, const std::vector<GenerationResult>& b) {
  Agreement out;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const size_t n = std::min(a[i].tokens.size(), b[i].tokens.size());
    size_t agree = 0;
    while (agree < n && a[i].tokens[agree] == b[i].tokens[agree]) ++agree;
    for (size_t t = 0; t < agree; ++t) out.gap = std::max(out.gap, double(std::abs(a[i].logp[t] - b[i].logp[t])));
    out.same += int64_t(agree);
    out.compared += int64_t(n);
  }
  return out;
}

}  // namespace

TEST_CASE("fused_decoder: norms, rotary and the gated product round as the plain ops do", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  torch::manual_seed(4);
  for (const torch::Dtype dtype : kDtypes) {
    INFO(c10::toString(dtype));
    const auto options = torch::TensorOptions(dtype).device(torch::kCUDA);
    // Odd row counts and widths that are not a multiple of the block: 3 rows of 1000, 64 of 2048
    // (the kernel of 16-byte packs); 5 of 1001 and 2 of 8200 (more packs than a block's threads):
    // the scalar kernel.
    for (const auto& [rows, dim] :
         std::vector<std::pair<int64_t, int64_t>>{{3, 1000}, {64, 2048}, {1, 32}, {5, 1001}, {2, 8200}}) {
      const torch::Tensor x = torch::randn({rows, 1, dim}, options) * 3;
      const torch::Tensor delta = torch::randn({rows, 1, dim}, options);
      const torch::Tensor weight = torch::randn({dim}, options);
      CHECK(relative_error(turnrl::detail::fused_rms_norm(x, weight, 1e-6), turnrl::detail::rms_norm(x, weight, 1e-6)) <=
            two_roundings(dtype));
      const auto [sum, normed] = turnrl::detail::fused_add_rms_norm(x, delta, weight, 1e-6);
      CHECK(torch::equal(sum, x + delta));
      CHECK(relative_error(normed, turnrl::detail::rms_norm(x + delta, weight, 1e-6)) <= two_roundings(dtype));
    }
    // 64 and 128: a warp a head; 96: a block a head.
    for (const int64_t head_dim : {int64_t(64), int64_t(128), int64_t(96)}) {
      const int64_t batch = 5, length = 3, heads = 4;
      const torch::Tensor x = torch::randn({batch, length, heads, head_dim}, options);
      const torch::Tensor weight = torch::rand({head_dim}, options) + 0.5;
      const torch::Tensor positions = torch::randint(0, 4000, {batch, length}, torch::TensorOptions(torch::kLong).device(torch::kCUDA));
      const torch::Tensor inv_freq = torch::pow(10000.0, -torch::arange(0, head_dim, 2, torch::kFloat) / double(head_dim));
      auto [cos, sin] = turnrl::detail::rotary_angles(positions, inv_freq.to(torch::kCUDA));
      cos = cos.to(dtype);
      sin = sin.to(dtype);
      for (const bool with_norm : {true, false}) {
        INFO("head_dim " << head_dim << (with_norm ? ", with" : ", without") << " the head norm");
        const torch::Tensor norm = with_norm ? weight : torch::Tensor();
        const torch::Tensor heads_first = x.transpose(1, 2);  // [B, H, T, D] as the plain layer holds it
        const torch::Tensor plain =
            turnrl::detail::apply_rotary(with_norm ? turnrl::detail::rms_norm(heads_first, weight, 1e-6) : heads_first, cos, sin).transpose(1, 2);
        const torch::Tensor fused = turnrl::detail::fused_norm_rotary(x, norm, cos, sin, 1e-6);
        // Without the norm both paths round the same products and sums: equal to the bit.
        if (with_norm) CHECK(relative_error(fused, plain) <= two_roundings(dtype));
        else CHECK(torch::equal(fused, plain.contiguous()));
      }
    }
    // 16-byte packs (3000 values a row), and one value at a time (3001).
    for (const int64_t width : {int64_t(3000), int64_t(3001)}) {
      const torch::Tensor gate = torch::randn({7, width}, options) * 4, up = torch::randn({7, width}, options);
      CHECK(relative_error(turnrl::detail::fused_silu_mul(gate, up), torch::silu(gate) * up) <= two_roundings(dtype));
    }
  }
}

TEST_CASE("fused_decoder: attention over the slots from merged q/k/v equals the plain path", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  REQUIRE(turnrl::detail::varlen_decode_attention_available());
  torch::manual_seed(5);
  const auto index = torch::TensorOptions(torch::kLong).device(torch::kCUDA);
  struct Case {
    const char* name;
    std::vector<int64_t> slot, start, count;
    bool leading;
  };
  // Decode: rows of 1 to 90 cached tokens and an idle row (count 0). Prefill: rows of 1 to 7 new
  // tokens after 0 to 60 cached ones, in slots out of order, padded to 7; and rows of 5 new tokens
  // each, none padded (the path without the gather and scatter of the real tokens).
  const std::vector<Case> cases = {{"decode", {0, 1, 2, 3, 4}, {0, 17, 89, 40, 3}, {1, 1, 1, 0, 1}, true},
                                   {"prefill", {4, 0, 2}, {0, 60, 5}, {7, 1, 4}, false},
                                   {"unpadded prefill", {1, 3, 0}, {0, 30, 8}, {5, 5, 5}, false}};
  const double eps = 1e-6;
  // The cache in the model's dtype and as e4m3 codes: a prefill over codes reads a decoded copy of
  // its rows with FlashAttention, a decode step reads the codes with the split-KV kernel (or, asked
  // for FlashAttention, takes the masked path over decoded rows as the plain path does).
  for (const bool fp8 : {false, true})
  for (const torch::Dtype dtype : {torch::kHalf, torch::kBFloat16}) {
    for (const Case& c : cases) {
      for (const bool norms : {false, true}) {
        for (const auto& [group_major, kernel] : std::vector<std::pair<bool, DecodeAttention>>{
                 {false, DecodeAttention::split_kv}, {true, DecodeAttention::split_kv},
                 {false, DecodeAttention::flash}, {true, DecodeAttention::flash}}) {
          INFO(c10::toString(dtype) << (fp8 ? ", fp8 cache" : "") << " " << c.name << (norms ? " with q/k norms" : "")
                                    << (group_major ? " group-major" : "")
                                    << (kernel == DecodeAttention::flash ? ", FlashAttention" : ", split-KV"));
          const auto options = torch::TensorOptions(dtype).device(torch::kCUDA);
          const int64_t slots = 6, capacity = 96, kv_heads = 2, groups = 4, heads = kv_heads * groups, dim = 128;
          const int64_t rows = int64_t(c.slot.size()), length = *std::max_element(c.count.begin(), c.count.end());
          SlotKVCache plain_cache = SlotKVCache::empty(1, slots, kv_heads, capacity, dim, options,
                                                       fp8 ? KVCacheDtype::fp8_e4m3 : KVCacheDtype::model);
          for (torch::Tensor* t : {&plain_cache.keys[0], &plain_cache.values[0]}) {
            const torch::Tensor x = torch::randn(t->sizes(), options);
            t->copy_(fp8 ? turnrl::detail::to_e4m3(x) : x);
          }
          SlotKVCache fused_cache;
          fused_cache.keys = {plain_cache.keys[0].clone()};
          fused_cache.values = {plain_cache.values[0].clone()};
          fused_cache.fp8_decodes_to = plain_cache.fp8_decodes_to;
          SlotBatch batch;
          batch.slot = torch::tensor(c.slot, index);
          batch.start = torch::tensor(c.start, index);
          batch.count = torch::tensor(c.count, index);
          batch.read_width = capacity;
          batch.leading_slots = c.leading;
          batch.fused_kernels = true;
          batch.decode_attention = kernel;
          const torch::Tensor tokens = torch::zeros({rows, length}, index);
          const turnrl::detail::SlotLayout plain_layout = turnrl::detail::slot_layout(tokens, batch, plain_cache);
          turnrl::detail::SlotLayout fused_layout = turnrl::detail::slot_layout(tokens, batch, fused_cache);
          REQUIRE(fused_layout.keys_used.defined());
          if (length == 1) fused_layout.grouped_query_offsets = fused_layout.query_offsets * groups;
          const torch::Tensor q = torch::randn({rows, length, heads, dim}, options);
          const torch::Tensor k = torch::randn({rows, length, kv_heads, dim}, options);
          const torch::Tensor v = torch::randn({rows, length, kv_heads, dim}, options);
          const torch::Tensor q_norm = norms ? torch::rand({dim}, options) + 0.5 : torch::Tensor();
          const torch::Tensor k_norm = norms ? torch::rand({dim}, options) + 0.5 : torch::Tensor();
          const torch::Tensor angles = torch::rand({rows, 1, length, dim / 2}, options.dtype(torch::kFloat)) * 6.3;
          const torch::Tensor cos = angles.cos().to(dtype), sin = angles.sin().to(dtype);
          // The plain path: norm and rotary by the (separately tested) fused_norm_rotary, keys and
          // values stored by index_copy, the masked grouped attention.
          const torch::Tensor q_rotated = turnrl::detail::fused_norm_rotary(q, q_norm, cos, sin, eps);
          const torch::Tensor k_rotated = turnrl::detail::fused_norm_rotary(k, k_norm, cos, sin, eps);
          const auto [keys, values] =
              turnrl::detail::store_in_slots(plain_layout, 0, k_rotated.transpose(1, 2), v.transpose(1, 2));
          const torch::Tensor want = turnrl::detail::grouped_attention(q_rotated.transpose(1, 2), keys, values, plain_layout.attend)
                                         .transpose(1, 2)
                                         .reshape({rows, length, -1});
          const torch::Tensor qkv = torch::cat({q.flatten(2), k.flatten(2), v.flatten(2)}, -1);
          const turnrl::detail::SlotAttention got =
              turnrl::detail::fused_slot_attention(fused_layout, 0, qkv, heads, q_norm, k_norm, cos, sin, eps, group_major);
          // (FlashAttention's grouped decode reads the model's dtype only.)
          CHECK(got.group_major == (group_major && length == 1 && !(fp8 && kernel == DecodeAttention::flash)));
          // The one kernel rounds as fused_norm_rotary does: the stored keys are those bits.
          CHECK(torch::equal(fused_cache.keys[0], plain_cache.keys[0]));
          CHECK(torch::equal(fused_cache.values[0], plain_cache.values[0]));
          torch::Tensor out = got.out;
          if (got.group_major) {  // back to the natural head order
            const torch::Tensor columns = turnrl::detail::group_major_columns(heads, kv_heads, dim).to(torch::kCUDA);
            out = torch::empty_like(got.out).index_copy_(2, columns, got.out);
          }
          // Real tokens only: padding positions and idle rows are meaningless in both.
          const torch::Tensor real = torch::arange(length, index).unsqueeze(0) < batch.count.unsqueeze(1);
          const double gap = max_abs_diff(out.index({real}), want.index({real}));
          INFO("max |fused - plain| " << gap);
          CHECK(gap < (dtype == torch::kHalf ? 2e-3 : 1.6e-2));
        }
      }
    }
  }
}

namespace {

// softmax(q k^T / sqrt(D)) v for each row over its own keys, by plain LibTorch ops in float64 on
// the CPU: q [rows, heads, D] in natural head order, keys and values [total, Hkv, D] (float64, CPU),
// row b reading used[b] keys from offsets[b] on (none: zeros). [rows, heads, D] float64.
torch::Tensor reference_decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                         const std::vector<int64_t>& offsets, const std::vector<int64_t>& used) {
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2), groups = heads / keys.size(1);
  const torch::Tensor queries = q.to(torch::kCPU, torch::kDouble);
  torch::Tensor out = torch::zeros({rows, heads, dim}, torch::kDouble);
  for (int64_t b = 0; b < rows; ++b) {
    if (used[size_t(b)] == 0) continue;
    // Query head h = j * groups + i reads key/value head j: [used, heads, D].
    const torch::Tensor k = keys.narrow(0, offsets[size_t(b)], used[size_t(b)]).repeat_interleave(groups, 1);
    const torch::Tensor v = values.narrow(0, offsets[size_t(b)], used[size_t(b)]).repeat_interleave(groups, 1);
    const torch::Tensor scores = torch::einsum("hd,nhd->hn", {queries[b], k}) / std::sqrt(double(dim));
    out[b] = torch::einsum("hn,nhd->hd", {scores.softmax(-1), v});
  }
  return out;
}

// decode_attention's tensor-core kernel switched on or off (decode_attention.cuh) while in scope.
KernelSwitch tensor_core_attention(bool on) {
  return KernelSwitch(turnrl::decoder_kernels::decode_attention_tensor_cores_enabled,
                      turnrl::decoder_kernels::set_decode_attention_tensor_cores, on);
}

// [rows, heads, D] from group-major head order to the natural one (group_major_columns()).
torch::Tensor natural_heads(const torch::Tensor& x, int64_t kv_heads) {
  const int64_t rows = x.size(0), heads = x.size(1), dim = x.size(2);
  const torch::Tensor columns = turnrl::detail::group_major_columns(heads, kv_heads, dim).to(x.device());
  return torch::empty({rows, heads * dim}, x.options())
      .index_copy_(1, columns, x.reshape({rows, heads * dim}))
      .view({rows, heads, dim});
}

}  // namespace

TEST_CASE("fused_decoder: split-KV decode attention equals a float64 softmax over each row's own keys", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  namespace d = turnrl::detail;
  torch::manual_seed(7);
  // Rows in slots out of order reading 1, 2, 17, 300 and all 320 keys of their slot, and none
  // (zeros; the engine's idle rows read one key).
  const int64_t slots = 6, capacity = 320;
  const std::vector<int64_t> slot = {4, 0, 2, 5, 1, 3}, used = {1, 2, 17, 300, capacity, 0};
  const int64_t rows = int64_t(slot.size());
  std::vector<int64_t> offsets;
  for (const int64_t s : slot) offsets.push_back(s * capacity);
  const auto int32 = torch::TensorOptions(torch::kInt).device(torch::kCUDA);
  const torch::Tensor key_offsets = torch::tensor(offsets, torch::kLong).to(int32);
  const torch::Tensor keys_used = torch::tensor(used, torch::kLong).to(int32);
  // The caches in the model's dtype, and as e4m3 codes (the kernel's 8-byte loads and the
  // hardware's conversion; the reference reads the values from_e4m3() gives the codes).
  for (const bool fp8 : {false, true})
  for (const torch::Dtype dtype : {torch::kBFloat16, torch::kHalf}) {
    // Output rounding: one rounding of the dtype of values of about 1 (the sums are float32).
    const double tolerance = dtype == torch::kBFloat16 ? 2e-2 : 2e-3;
    const auto options = torch::TensorOptions(dtype).device(torch::kCUDA);
    for (const int64_t dim : {int64_t(64), int64_t(128)}) {
      // 7: Qwen2.5-0.5B's and -7B's heads a group, not a power of two.
      for (const int64_t groups : {int64_t(1), int64_t(2), int64_t(4), int64_t(7)}) {
        const int64_t kv_heads = 2, heads = kv_heads * groups;
        const auto cache_of = [&] {
          const torch::Tensor x = torch::randn({(slots + 1) * capacity, kv_heads, dim}, options);
          return fp8 ? d::to_e4m3(x) : x;
        };
        const auto exact = [&](const torch::Tensor& c) {
          return (fp8 ? d::from_e4m3(c, torch::kFloat) : c).to(torch::kCPU, torch::kDouble);
        };
        const torch::Tensor keys = cache_of(), values = cache_of();
        // Twice the unit scale: softmaxes peaked enough that the running maxima matter.
        const torch::Tensor q = torch::randn({rows, heads, dim}, options) * 2;
        const torch::Tensor want = reference_decode_attention(q, exact(keys), exact(values), offsets, used);
        const torch::Tensor columns = d::group_major_columns(heads, kv_heads, dim).to(torch::kCUDA);
        for (const bool group_major : {false, true}) {
          const torch::Tensor input =
              group_major ? q.reshape({rows, heads * dim}).index_select(1, columns).view({rows, heads, dim}) : q;
          // 0: the count chosen for this GPU; 16 is more splits than the first rows have keys.
          for (const int64_t splits : {int64_t(1), int64_t(3), int64_t(16), int64_t(0)})
          for (const bool tensor_cores : {false, true}) {
            INFO(c10::toString(dtype) << (fp8 ? ", fp8 cache" : "") << ", head_dim " << dim << ", " << groups
                                      << " heads a group" << (group_major ? ", group-major" : "") << ", splits "
                                      << splits << (tensor_cores ? ", tensor cores" : ""));
            const KernelSwitch switched = tensor_core_attention(tensor_cores);
            torch::Tensor got =
                d::decode_attention(input, keys, values, key_offsets, keys_used, group_major, capacity, splits);
            REQUIRE(got.sizes() == q.sizes());
            REQUIRE(got.scalar_type() == dtype);
            if (group_major) got = natural_heads(got, kv_heads);
            const torch::Tensor got64 = got.to(torch::kCPU, torch::kDouble);
            INFO("max |kernel - float64| " << (got64 - want).abs().max().item<double>());
            CHECK(torch::allclose(got64, want, tolerance, tolerance));
            CHECK(torch::equal(got64[rows - 1], torch::zeros_like(want[rows - 1])));  // the row without keys
          }
        }
      }
    }
  }
  const auto options = torch::TensorOptions(torch::kBFloat16).device(torch::kCUDA);
  const torch::Tensor keys = torch::randn({(slots + 1) * capacity, 2, 96}, options);
  CHECK_THROWS_WITH(d::decode_attention(torch::randn({rows, 4, 96}, options), keys, keys, key_offsets, keys_used, false,
                                        capacity),
                    Catch::Contains("head_dim 96"));
  const torch::Tensor keys128 = torch::randn({(slots + 1) * capacity, 2, 128}, options);
  CHECK_THROWS_WITH(d::decode_attention(torch::randn({rows, 4, 128}, options), keys128.to(torch::kFloat), keys128,
                                        key_offsets, keys_used, false, capacity),
                    Catch::Contains("keys must be"));
  CHECK_THROWS_WITH(d::decode_attention(torch::randn({rows, 4, 128}, options), keys128, keys128, key_offsets,
                                        keys_used.to(torch::kLong), false, capacity),
                    Catch::Contains("keys_used must be"));
}

TEST_CASE("fused_decoder: split-KV attention straight from merged q/k/v equals qkv_rotary_store then the kernel, to the bit",
          "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  namespace d = turnrl::detail;
  namespace dk = turnrl::decoder_kernels;
  torch::manual_seed(9);
  const auto index = torch::TensorOptions(torch::kLong).device(torch::kCUDA);
  const double eps = 1e-6;
  // Decode rows in leading slots (the engine's graphs): rows reading 1, 18, 40 and all keys of
  // their slot, and an idle row (count 0: its key and value go to the scratch row). A capacity of
  // 96 gets 2 splits on any GPU, 1024 up to 16: the new key lands in the first, a middle or the
  // last split of its row.
  // Keys and values in the model's dtype, and as fp8 codes (both kernels round them to e4m3 by the
  // hardware's conversion; checked against to_e4m3()'s LibTorch ops too).
  for (const KVCacheDtype storage : {KVCacheDtype::model, KVCacheDtype::fp8_e4m3})
  for (const torch::Dtype dtype : {torch::kBFloat16, torch::kHalf}) {
    const auto options = torch::TensorOptions(dtype).device(torch::kCUDA);
    for (const int64_t dim : {int64_t(64), int64_t(128), int64_t(256)}) {
      for (const int64_t groups : {int64_t(1), int64_t(2), int64_t(3), int64_t(8)}) {
        for (const int64_t capacity : {int64_t(96), int64_t(1024)}) {
          const int64_t kv_heads = 2, heads = kv_heads * groups, slots = 6;
          const std::vector<int64_t> start = {0, 17, 39, capacity - 1, 5}, count = {1, 1, 1, 1, 0};
          const int64_t rows = int64_t(start.size());
          SlotBatch batch;
          batch.slot = torch::arange(rows, index);
          batch.start = torch::tensor(start, index);
          batch.count = torch::tensor(count, index);
          batch.read_width = capacity;
          batch.leading_slots = true;
          batch.fused_kernels = true;
          batch.decode_attention = DecodeAttention::split_kv;
          const torch::Tensor qkv = torch::randn({rows, 1, (heads + 2 * kv_heads) * dim}, options) * 2;
          const torch::Tensor angles = torch::rand({rows, 1, 1, dim / 2}, options.dtype(torch::kFloat)) * 6.3;
          const torch::Tensor cos = angles.cos().to(dtype), sin = angles.sin().to(dtype);
          const torch::Tensor tokens = torch::zeros({rows, 1}, index);
          SlotKVCache first = SlotKVCache::empty(1, slots, kv_heads, capacity, dim, options, storage);
          for (torch::Tensor* t : {&first.keys[0], &first.values[0]}) {
            const torch::Tensor noise = torch::randn(t->sizes(), options);
            t->copy_(storage == KVCacheDtype::fp8_e4m3 ? turnrl::detail::to_e4m3(noise) : noise);
          }
          for (const bool norms : {true, false}) {
            const torch::Tensor q_norm = norms ? torch::rand({dim}, options) + 0.5 : torch::Tensor();
            const torch::Tensor k_norm = norms ? torch::rand({dim}, options) + 0.5 : torch::Tensor();
            for (const bool group_major : {false, true}) {
              INFO(c10::toString(dtype) << ", head_dim " << dim << ", " << groups << " heads a group, capacity "
                                        << capacity << (norms ? ", q/k norms" : "")
                                        << (group_major ? ", group-major" : "")
                                        << (storage == KVCacheDtype::fp8_e4m3 ? ", fp8 cache" : ""));
              // The two launches (qkv_rotary_store, then the kernel) and the one, each on its own
              // copy of the cache.
              std::vector<SlotKVCache> caches(2);
              std::vector<torch::Tensor> outs;
              for (const bool one_launch : {false, true}) {
                SlotKVCache& cache = caches[one_launch];
                cache.keys = {first.keys[0].clone()};
                cache.values = {first.values[0].clone()};
                cache.fp8_decodes_to = dtype;
                d::SlotLayout layout = d::slot_layout(tokens, batch, cache);
                layout.grouped_query_offsets = layout.query_offsets * groups;
                const KernelSwitch switched(dk::decode_attention_from_qkv_enabled,
                                            dk::set_decode_attention_from_qkv, one_launch);
                const d::SlotAttention got =
                    d::fused_slot_attention(layout, 0, qkv, heads, q_norm, k_norm, cos, sin, eps, group_major);
                CHECK(got.group_major == (group_major && groups > 1));
                outs.push_back(got.out);
              }
              CHECK(torch::equal(caches[1].keys[0], caches[0].keys[0]));
              CHECK(torch::equal(caches[1].values[0], caches[0].values[0]));
              if (storage == KVCacheDtype::fp8_e4m3) {
                // The codes written are what to_e4m3() makes of the keys and values a cache in
                // the model's dtype gets.
                SlotKVCache plain = SlotKVCache::empty(1, slots, kv_heads, capacity, dim, options, KVCacheDtype::model);
                d::SlotLayout layout = d::slot_layout(tokens, batch, plain);
                layout.grouped_query_offsets = layout.query_offsets * groups;
                {
                  const KernelSwitch two_launches(dk::decode_attention_from_qkv_enabled,
                                                  dk::set_decode_attention_from_qkv, false);
                  (void)d::fused_slot_attention(layout, 0, qkv, heads, q_norm, k_norm, cos, sin, eps, group_major);
                }
                const auto written = [&](const torch::Tensor& cache) {
                  return cache.view({-1, kv_heads, dim}).index_select(0, layout.write_index);
                };
                CHECK(torch::equal(written(caches[0].keys[0]), d::to_e4m3(written(plain.keys[0]))));
                CHECK(torch::equal(written(caches[0].values[0]), d::to_e4m3(written(plain.values[0]))));
              }
              // Idle rows' outputs are meaningless; the others are the same bits.
              CHECK(torch::equal(outs[1].narrow(0, 0, rows - 1), outs[0].narrow(0, 0, rows - 1)));
              // And the new keys did land: row 1's key at position 17 is no longer the random one.
              CHECK(!torch::equal(caches[1].keys[0][1][17], first.keys[0][1][17]));
            }
          }
        }
      }
    }
  }
}

namespace {

// qwen3-tiny's shape with head_dim 64 (the fixtures' 16 is not one the split-KV kernel takes), in
// bfloat16 on the GPU, weights normal(0, 0.05) and norms one.
HFDecoder split_kv_test_model() {
  HFConfig config = parse_hf_config(hf_preset_config("qwen3-tiny", HfPresetVocab{512, 0, 0}), "qwen3-tiny");
  config.head_dim = 64;
  torch::manual_seed(8);
  HFDecoder model(config, torch::TensorOptions(torch::kBFloat16).device(torch::kCUDA));
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters())
    p.key().find("norm") != std::string::npos ? p.value().fill_(1.0) : p.value().normal_(0.0, 0.05);
  model->eval();
  return model;
}

}  // namespace

TEST_CASE("fused_decoder: a decode step with split-KV attention picks FlashAttention's greedy tokens", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  torch::NoGradGuard no_grad;
  HFDecoder model = split_kv_test_model();
  const auto index = torch::TensorOptions(torch::kLong).device(torch::kCUDA);
  // Eight rows of 1 to 200 cached tokens, prefilled once; then one decode step with each kernel
  // (both write the same new keys to the same places).
  const std::vector<int64_t> lengths = {1, 7, 33, 64, 100, 129, 180, 200};
  const int64_t rows = int64_t(lengths.size()), capacity = 256, longest = 200;
  for (const bool merged : {false, true}) {
    INFO((merged ? "merged projections (group-major heads)" : "separate projections"));
    SlotKVCache cache = model->make_slot_cache(rows, capacity);
    SlotBatch prefill;
    prefill.slot = torch::arange(rows, index);
    prefill.start = torch::zeros({rows}, index);
    prefill.count = torch::tensor(lengths, index);
    prefill.read_width = longest;
    prefill.leading_slots = true;
    prefill.fused_kernels = true;
    prefill.merged_projections = merged;
    model->slot_hidden(torch::randint(0, model->config().vocab_size, {rows, longest}, index), prefill, cache);
    SlotBatch step = prefill;
    step.start = prefill.count;
    step.count = torch::ones({rows}, index);
    step.read_width = capacity;
    const torch::Tensor tokens = torch::randint(0, model->config().vocab_size, {rows, 1}, index);
    std::vector<torch::Tensor> logits;
    // FlashAttention's, then the split-KV kernel's scalar and tensor-core forms.
    for (const int kernel : {0, 1, 2}) {
      step.decode_attention = kernel == 0 ? DecodeAttention::flash : DecodeAttention::split_kv;
      const KernelSwitch switched = tensor_core_attention(kernel == 2);
      logits.push_back(model->logits(model->slot_hidden(tokens, step, cache).select(1, 0)).to(torch::kFloat));
    }
    const torch::Tensor& flash = logits[0];
    for (const int kernel : {1, 2}) {
      INFO((kernel == 2 ? "tensor cores" : "scalar kernel"));
      const torch::Tensor& split_kv = logits[size_t(kernel)];
      const double gap = max_abs_diff(split_kv, flash);
      INFO("max |split-KV - FlashAttention| logit " << gap << " of logits up to " << flash.abs().max().item<double>());
      CHECK(gap <= 0.05 * flash.abs().max().item<double>());
      // The same greedy token wherever FlashAttention's best two logits are further apart than the
      // two kernels' logits can move them.
      const auto top = flash.topk(2, -1);
      const torch::Tensor clear = (std::get<0>(top).select(1, 0) - std::get<0>(top).select(1, 1)) > 2 * gap;
      const torch::Tensor same = split_kv.argmax(-1).eq(std::get<1>(top).select(1, 0));
      CHECK(same.logical_or(clear.logical_not()).all().item<bool>());
      WARN((merged ? "merged" : "separate") << (kernel == 2 ? ", tensor cores: " : ": ") << clear.sum().item<int64_t>()
                                            << " of " << rows << " rows with a clear greedy token");
    }
  }
}

TEST_CASE("fused_decoder: the engine with split-KV attention generates FlashAttention's greedy tokens", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  HFDecoder model = split_kv_test_model();
  std::vector<GenerationRequest> requests;
  torch::manual_seed(9);
  for (const int64_t length : {1, 5, 40, 90, 130, 170}) {
    const torch::Tensor prompt = torch::randint(0, model->config().vocab_size, {length}, torch::kLong);
    requests.push_back(GenerationRequest()
                           .prompt(std::vector<int64_t>(prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + length))
                           .options(SamplingOptions().max_new(40).temp(0))
                           .stream(length));
  }
  std::vector<std::vector<GenerationResult>> runs;
  // FlashAttention's, then the split-KV kernel's scalar and tensor-core forms (graphs captured anew
  // by each engine).
  for (const int kernel : {0, 1, 2}) {
    const KernelSwitch switched = tensor_core_attention(kernel == 2);
    GenerationEngine engine(model, GenerationEngineOptions().slots(8).capacity(256).decode_attention(
                                       kernel == 0 ? DecodeAttention::flash : DecodeAttention::split_kv));
    for (const GenerationRequest& r : requests) engine.add(r);
    runs.push_back(engine.run());
  }
  // Greedy tokens agree until a step where two tokens' logits are within the kernels' rounding of
  // each other (rare on this model); log-probs agree closely up to there.
  for (const int kernel : {1, 2}) {
    INFO((kernel == 2 ? "tensor cores" : "scalar kernel"));
    const Agreement a = agreement(runs[0], runs[size_t(kernel)]);
    WARN("split-KV" << (kernel == 2 ? " (tensor cores)" : "") << " and FlashAttention engines agree on " << a.same
                    << " of " << a.compared << " greedy tokens, largest log-prob gap " << a.gap);
    CHECK(a.gap < 0.05);
    CHECK(double(a.same) >= 0.9 * double(a.compared));
  }
}

TEST_CASE("fused_decoder: the merged gate/up product equals the separate one", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  torch::manual_seed(6);
  for (const torch::Dtype dtype : kDtypes) {
    INFO(c10::toString(dtype));
    const torch::Tensor gate_up = torch::randn({3, 5, 2 * 96}, torch::TensorOptions(dtype).device(torch::kCUDA));
    const torch::Tensor want = turnrl::detail::fused_silu_mul(gate_up.narrow(-1, 0, 96), gate_up.narrow(-1, 96, 96));
    CHECK(torch::equal(turnrl::detail::fused_silu_mul_merged(gate_up), want));
  }
}

TEST_CASE("fused_decoder: the bf16 engine with fused kernels samples what it samples without them", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  for (const std::string& family : hf_families()) {
    INFO(family);
    auto policy = load_gpu_fixture(family, torch::kBFloat16);
    const std::vector<GenerationRequest> requests = mixed_requests();
    std::vector<std::vector<GenerationResult>> runs;
    for (const bool fused : {true, false}) {
      GenerationEngine engine(policy->model(), GenerationEngineOptions().slots(4).capacity(64).fused_kernels(fused));
      for (const GenerationRequest& r : requests) engine.add(r);
      runs.push_back(engine.run());
    }
    // Same kernels' roundings up to float32 sum order and the attention kernel: log-probs agree
    // closely, and a sampled token differs only where two tokens' probabilities are that close.
    const Agreement a = agreement(runs[0], runs[1]);
    WARN(family << ": fused and plain engines agree on " << a.same << " of " << a.compared
                << " sampled tokens, largest log-prob gap " << a.gap);
    CHECK(a.gap < 0.05);
    CHECK(double(a.same) >= 0.8 * double(a.compared));
  }
}

TEST_CASE("fused_decoder: over an fp8 cache the fused bf16 engine samples what the plain one samples", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  // head_dim 64: the split-KV kernel reads the codes (the fixtures' 16 takes the masked path).
  HFDecoder model = split_kv_test_model();
  const std::vector<GenerationRequest> requests = mixed_requests();
  std::vector<std::vector<GenerationResult>> runs;
  for (const auto& [fused, storage] : std::vector<std::pair<bool, KVCacheDtype>>{{true, KVCacheDtype::fp8_e4m3},
                                                                                {false, KVCacheDtype::fp8_e4m3},
                                                                                {true, KVCacheDtype::model},
                                                                                {false, KVCacheDtype::model}}) {
    GenerationEngine engine(model, GenerationEngineOptions().slots(4).capacity(128).fused_kernels(fused).kv_cache_dtype(storage));
    for (const GenerationRequest& r : requests) engine.add(r);
    runs.push_back(engine.run());
  }
  {
    // And the fused engine over codes with the tensor-core attention kernel.
    const KernelSwitch switched = tensor_core_attention(true);
    GenerationEngine engine(model, GenerationEngineOptions().slots(4).capacity(128).kv_cache_dtype(KVCacheDtype::fp8_e4m3));
    for (const GenerationRequest& r : requests) engine.add(r);
    runs.push_back(engine.run());
  }
  // Over the bf16 cache the two engines agree (the control). Over codes they agree less: the fused
  // engine's merged projections round their outputs differently from the plain engine's separate
  // ones by an ulp of bf16 here and there, and the three mantissa bits of e4m3 turn such an ulp
  // near a midpoint into a whole code apart. So the check is relative: the two engines over the
  // same codes stay together longer than one engine over codes and over bf16 (the fp8 rollout's
  // mismatch, reported). A kernel that misread the codes would not (the float64 test above checks
  // that reading directly).
  const Agreement codes = agreement(runs[0], runs[1]), control = agreement(runs[2], runs[3]);
  const Agreement mismatch = agreement(runs[0], runs[2]);
  WARN("fused against plain engine: " << codes.same << " of " << codes.compared
                                      << " sampled tokens alike over the fp8 cache (largest log-prob gap " << codes.gap
                                      << "), " << control.same << " of " << control.compared << " over the bf16 cache ("
                                      << control.gap << "); fp8 against bf16 cache, fused: " << mismatch.same << " of "
                                      << mismatch.compared << " (" << mismatch.gap << ")");
  CHECK(double(control.same) >= 0.8 * double(control.compared));
  CHECK(codes.same > mismatch.same);
  // The tensor-core kernel rounds the attention weights to float16 where the scalar one keeps
  // float32: over the same codes they too stay together longer than codes and bf16 do.
  const Agreement tensor_cores = agreement(runs[0], runs[4]);
  WARN("fused engine over the fp8 cache, tensor-core against scalar attention: " << tensor_cores.same << " of "
                                                                                 << tensor_cores.compared << " alike ("
                                                                                 << tensor_cores.gap << ")");
  CHECK(tensor_cores.same > mismatch.same);
}

namespace {

// Gradients of sum(f(inputs) * probe) with respect to each input that requires one.
std::vector<torch::Tensor> gradients(const std::function<torch::Tensor()>& f, const std::vector<torch::Tensor>& inputs,
                                     const torch::Tensor& probe) {
  for (const torch::Tensor& t : inputs) t.mutable_grad() = torch::Tensor();
  (f().to(torch::kFloat) * probe).sum().backward();
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& t : inputs) out.push_back(t.grad().clone());
  return out;
}

// Summed in float32 in both paths, in different orders: a gradient of a bf16 op through several
// roundings of its inputs moves by a few of them.
double gradient_tolerance(torch::Dtype dtype) {
  return dtype == torch::kBFloat16 ? 0.05 : dtype == torch::kHalf ? 0.01 : 1e-4;
}

}  // namespace

TEST_CASE("fused_decoder: the fused ops' gradients equal the plain ops' gradients", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  torch::manual_seed(6);
  namespace d = turnrl::detail;
  for (const torch::Dtype dtype : kDtypes) {
    INFO(c10::toString(dtype));
    const auto options = torch::TensorOptions(dtype).device(torch::kCUDA);
    {
      INFO("rms_norm over 33 rows of 1000 (a partial last block of rows)");
      const torch::Tensor x = (torch::randn({33, 1, 1000}, options) * 2).requires_grad_();
      const torch::Tensor w = (torch::rand({1000}, options) + 0.5).requires_grad_();
      const torch::Tensor probe = torch::randn({33, 1, 1000}, torch::TensorOptions(torch::kFloat).device(torch::kCUDA));
      const auto fused = gradients([&] { return d::fused_rms_norm(x, w, 1e-6); }, {x, w}, probe);
      const auto plain = gradients([&] { return d::rms_norm(x, w, 1e-6); }, {x, w}, probe);
      for (size_t i = 0; i < fused.size(); ++i) CHECK(relative_error(fused[i], plain[i]) <= gradient_tolerance(dtype));
    }
    for (const bool with_norm : {true, false}) {
      INFO("norm_rotary, " << (with_norm ? "with" : "without") << " the head norm");
      const int64_t batch = 3, length = 17, heads = 4, dim = 128;
      const torch::Tensor x = torch::randn({batch, length, heads, dim}, options).requires_grad_();
      const torch::Tensor w = (torch::rand({dim}, options) + 0.5).requires_grad_();
      const torch::Tensor positions =
          torch::arange(length, torch::TensorOptions(torch::kLong).device(torch::kCUDA)).unsqueeze(0).expand({batch, length});
      const torch::Tensor inv_freq = torch::pow(10000.0, -torch::arange(0, dim, 2, torch::kFloat) / double(dim));
      auto [cos, sin] = d::rotary_angles(positions, inv_freq.to(torch::kCUDA));
      cos = cos.to(dtype);
      sin = sin.to(dtype);
      const torch::Tensor probe =
          torch::randn({batch, length, heads, dim}, torch::TensorOptions(torch::kFloat).device(torch::kCUDA));
      const torch::Tensor norm = with_norm ? w : torch::Tensor();
      const auto fused = gradients([&] { return d::fused_norm_rotary(x, norm, cos, sin, 1e-6); }, {x}, probe);
      const auto plain = gradients(
          [&] {
            const torch::Tensor h = x.transpose(1, 2);
            return d::apply_rotary(with_norm ? d::rms_norm(h, w, 1e-6) : h, cos, sin).transpose(1, 2);
          },
          {x}, probe);
      CHECK(relative_error(fused[0], plain[0]) <= gradient_tolerance(dtype));
      if (with_norm) {
        w.mutable_grad() = torch::Tensor();
        (d::fused_norm_rotary(x, w, cos, sin, 1e-6).to(torch::kFloat) * probe).sum().backward();
        const torch::Tensor fused_w = w.grad().clone();
        w.mutable_grad() = torch::Tensor();
        (d::apply_rotary(d::rms_norm(x.transpose(1, 2), w, 1e-6), cos, sin).transpose(1, 2).to(torch::kFloat) * probe)
            .sum()
            .backward();
        CHECK(relative_error(fused_w, w.grad()) <= gradient_tolerance(dtype));
      }
    }
    {
      INFO("silu_mul");
      const torch::Tensor g = (torch::randn({5, 3001}, options) * 3).requires_grad_();
      const torch::Tensor u = torch::randn({5, 3001}, options).requires_grad_();
      const torch::Tensor probe = torch::randn({5, 3001}, torch::TensorOptions(torch::kFloat).device(torch::kCUDA));
      const auto fused = gradients([&] { return d::fused_silu_mul(g, u); }, {g, u}, probe);
      const auto plain = gradients([&] { return torch::silu(g) * u; }, {g, u}, probe);
      for (size_t i = 0; i < fused.size(); ++i) CHECK(relative_error(fused[i], plain[i]) <= gradient_tolerance(dtype));
    }
  }
}

TEST_CASE("fused_decoder: a decoder trained through the fused kernels gets the plain path's log-probs and gradients",
          "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  for (const torch::Dtype dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const std::string& family : hf_families()) {
      INFO(family << " " << c10::toString(dtype));
      auto policy = load_gpu_fixture(family, dtype);
      const auto [tokens, mask] = left_pad({{5, 6, 7, 8, 9, 10}, {9, 10, 11, 12, 13, 14, 15, 16, 17}}, 0, torch::kCUDA);
      const torch::Tensor response = mask.clone();
      response.narrow(1, 0, 3).fill_(false);
      std::vector<TokenLogp> logps;
      std::vector<std::vector<torch::Tensor>> grads;
      for (const bool fused : {false, true}) {
        policy->model()->set_fused_kernels(fused);
        policy->model()->zero_grad();
        TokenLogp t = policy->forward_logp(tokens, mask, response);
        t.logp.masked_select(response).sum().backward();
        std::vector<torch::Tensor> g;
        for (const auto& p : policy->model()->parameters()) g.push_back(p.grad().to(torch::kFloat).clone());
        logps.push_back(t);
        grads.push_back(g);
      }
      const double logp_gap = max_abs_diff(logps[0].logp.masked_select(response), logps[1].logp.masked_select(response));
      double worst = 0;
      for (size_t i = 0; i < grads[0].size(); ++i)
        worst = std::max(worst, (grads[1][i] - grads[0][i]).norm().item<double>() / std::max(grads[0][i].norm().item<double>(), 1e-12));
      WARN(family << " " << c10::toString(dtype) << ": max |logp fused - plain| " << logp_gap
                  << ", worst relative gradient difference " << worst);
      CHECK(logp_gap < (dtype == torch::kFloat ? 1e-4 : 0.05));
      CHECK(worst < (dtype == torch::kFloat ? 1e-3 : 0.05));
    }
  }
}

TEST_CASE("fused_decoder: chunked log-probs and entropies by the one-pass kernels equal the plain chunks", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  torch::manual_seed(7);
  for (const torch::Dtype dtype : kDtypes) {
    INFO(c10::toString(dtype));
    const auto options = torch::TensorOptions(dtype).device(torch::kCUDA);
    // 37 rows in chunks of 16 (a short last chunk), a vocabulary that is not a multiple of the block.
    const int64_t rows = 37, hidden_size = 64, vocab = 5003;
    const torch::Tensor hidden = torch::randn({rows, hidden_size}, options).requires_grad_();
    const torch::Tensor weight = (torch::randn({vocab, hidden_size}, options) * 0.3).requires_grad_();
    const torch::Tensor targets = torch::randint(0, vocab, {rows}, torch::TensorOptions(torch::kLong).device(torch::kCUDA));
    const torch::Tensor a = torch::randn({rows}, torch::TensorOptions(torch::kFloat).device(torch::kCUDA));
    const torch::Tensor b = torch::randn({rows}, torch::TensorOptions(torch::kFloat).device(torch::kCUDA));
    // At temperature 1 and at a sampling temperature (logits divided by it before the softmax).
    for (const double temperature : {1.0, 0.7}) {
      INFO("temperature " << temperature);
      std::vector<RowLogp> outs;
      std::vector<std::vector<torch::Tensor>> grads;
      for (const bool fused : {false, true}) {
        hidden.mutable_grad() = torch::Tensor();
        weight.mutable_grad() = torch::Tensor();
        const RowLogp r = chunked_logp_entropy(hidden, weight, targets, 16, fused, temperature);
        (r.logp * a + r.entropy * b).sum().backward();
        outs.push_back(r);
        grads.push_back({hidden.grad().clone(), weight.grad().clone()});
      }
      const double value_tolerance = dtype == torch::kFloat ? 1e-4 : 1e-3;  // float32 math on the same logits
      CHECK(max_abs_diff(outs[1].logp, outs[0].logp) < value_tolerance);
      CHECK(max_abs_diff(outs[1].entropy, outs[0].entropy) < value_tolerance);
      for (size_t i = 0; i < 2; ++i) CHECK(relative_error(grads[1][i], grads[0][i]) <= gradient_tolerance(dtype));
    }
    // Only the log-probs differentiated: the entropy's term is left out, as in the plain path.
    hidden.mutable_grad() = torch::Tensor();
    chunked_logp_entropy(hidden, weight, targets, 16, true).logp.mul(a).sum().backward();
    const torch::Tensor fused_only_logp = hidden.grad().clone();
    hidden.mutable_grad() = torch::Tensor();
    chunked_logp_entropy(hidden, weight, targets, 16, false).logp.mul(a).sum().backward();
    CHECK(relative_error(fused_only_logp, hidden.grad()) <= gradient_tolerance(dtype));
  }
}

TEST_CASE("fused_decoder: the one-kernel sampler draws what draw_tokens draws, greedy and at temperatures", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  torch::manual_seed(11);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  for (const torch::Dtype dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const int64_t vocab : {int64_t(7), int64_t(5003), int64_t(151936)}) {
      INFO(c10::toString(dtype) << ", vocab " << vocab);
      const int64_t rows = 96;
      torch::Tensor logits = (torch::randn({rows, vocab}, cuda) * 3).to(dtype);
      // Row 0: one token holds all the mass (the others' probabilities underflow to 0).
      logits[0].fill_(-1e4);
      logits[0][vocab / 2] = 30;
      const torch::Tensor temperature =
          torch::tensor({0.0f, 0.7f, 1.0f, 1.3f}, cuda.dtype(torch::kFloat)).repeat({rows / 4});
      torch::Tensor uniform = torch::rand({rows}, cuda.dtype(torch::kDouble)).clamp_min(1e-12);
      uniform[5] = 1.0;  // the target is the whole mass: the last token with any
      RowSampling sampling;
      sampling.temperature = temperature;
      sampling.top_k = torch::zeros({rows}, cuda.dtype(torch::kLong));
      sampling.top_p = torch::ones({rows}, cuda.dtype(torch::kFloat));
      sampling.filtered = false;
      const auto [want_token, want_logp] = draw_tokens(logits, sampling, uniform);
      const auto [token, logp] = turnrl::detail::fused_sample_unfiltered(logits, temperature, uniform);
      const torch::Tensor same = token.eq(want_token);
      const int64_t differ = rows - same.sum().item<int64_t>();
      INFO(differ << " of " << rows << " rows drew another token");
      // Running sums in another order move a boundary by a rounding: a draw differs only where u
      // lands within that of it, which random uniforms almost never do.
      CHECK(differ <= 1);
      CHECK(max_abs_diff(logp.masked_select(same), want_logp.masked_select(same)) < 1e-4);
      CHECK(token[0].item<int64_t>() == vocab / 2);
      const torch::Tensor probs = torch::softmax(logits.to(torch::kFloat) / temperature.clamp_min(1e-6).unsqueeze(1), -1);
      CHECK(probs[5][token[5].item<int64_t>()].item<float>() > 0);
      CHECK(token.ge(0).all().item<bool>());
      CHECK(token.lt(vocab).all().item<bool>());
    }
  }
}

TEST_CASE("fused_decoder: the one-kernel sampler's inverse CDF on a grid of uniforms, by a scalar loop", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  // Seven tokens with known probabilities (softmax of their logits at temperature 1), one of them
  // with none; 999 uniforms over (0, 1].
  const std::vector<double> logit = {0.5, -1.0, 2.0, -1e4, 0.0, 1.0, -0.5};
  std::vector<double> p(logit.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp(logit[i]);
  const int64_t n = 999;
  std::vector<double> u(n);
  for (int64_t i = 0; i < n; ++i) u[size_t(i)] = double(i + 1) / double(n);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor logits = torch::tensor(logit, cuda.dtype(torch::kDouble)).to(torch::kFloat).repeat({n, 1});
  const torch::Tensor temperature = torch::ones({n}, cuda.dtype(torch::kFloat));
  const auto [token, logp] =
      turnrl::detail::fused_sample_unfiltered(logits, temperature, torch::tensor(u, cuda.dtype(torch::kDouble)));
  const torch::Tensor got = token.cpu();
  int64_t checked = 0;
  for (int64_t i = 0; i < n; ++i) {
    double running = 0;
    size_t want = 0;
    bool near_boundary = false;
    for (size_t k = 0; k < p.size(); ++k) {
      running += p[k];
      near_boundary = near_boundary || std::abs(running - u[size_t(i)] * total) < 1e-5;
      if (running >= u[size_t(i)] * total && p[k] > 1e-30) {
        want = k;
        break;
      }
    }
    if (near_boundary) continue;
    INFO("u = " << u[size_t(i)]);
    CHECK(got[i].item<int64_t>() == int64_t(want));
    ++checked;
  }
  CHECK(checked > 990);
}
