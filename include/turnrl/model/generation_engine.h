#pragma once
// GenerationEngine: batched generation for an HFDecoder, what HFPolicy's rollouts run on.
//
//   GenerationEngine engine(model, GenerationEngineOptions().slots(64).capacity(4096));
//   int64_t id = engine.add({prompt_tokens, SamplingOptions().max_new(256).temp(1), /*key=*/seed});
//   std::vector<GenerationResult> results = engine.run();   // every added request, in id order
//
// - A static cache (SlotKVCache, kv_cache.h) of `slots` sequences x `capacity` tokens per layer, in
//   the model's dtype or as fp8 e4m3 codes (kv_cache_dtype), allocated once.
// - Continuous batching: a waiting request takes a slot as soon as one is free; the new requests of
//   a step are prefilled together (up to prefill_tokens), then one decode step advances every
//   running sequence; a finished sequence frees its slot at once.
// - Sampling on the model's device with each request's own temperature, top-k, top-p, stop tokens
//   and token budget; log-probs recorded under the distribution drawn from (sampler.h).
// - Each request draws its own random stream (its key, counter_uniform in sampler.h), so its result
//   does not depend on which other requests share its batches: run alone, in any batch, or through
//   sample() with the same key, a request gives the same tokens.
// - Prefix reuse: a request with keep() stays cached after it finishes; a later request that
//   extends() it prefills only the tokens past the longest common prefix of the two sequences (a
//   multi-turn episode's next prompt is the previous prompt, response and new feedback). Kept
//   sequences are evicted, least recently used first, when a request needs their slot; a request
//   extending an evicted sequence is prefilled in full (same result, more work).
// - Prefix sharing (share_prefixes): a request copies the longest prefix another slot has cached
//   (an RL group's n samples of one prompt prefill it once).
// - On CUDA the decode step is a CUDA graph per batch-size bucket (powers of two up to `slots`)
//   and read-width bucket (the cached positions it attends over: powers of two from 64 up to
//   `capacity`, so short sequences do not read a long slot's whole capacity), replayed with the
//   inputs copied into static buffers; elsewhere it runs eagerly over exactly the positions used.
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/arg.h>

#include "turnrl/model/hf_decoder.h"
#include "turnrl/model/sampler.h"

namespace turnrl {

struct GenerationEngineOptions {
  TORCH_ARG(int64_t, slots) = 64;          // sequences decoded together (the decode batch)
  TORCH_ARG(int64_t, capacity) = 4096;     // tokens one slot holds: prompt + response (+ later turns when kept)
  TORCH_ARG(int64_t, prefill_tokens) = 16384;  // new tokens per batched prefill (one request is always admitted)
  TORCH_ARG(bool, cuda_graphs) = true;     // capture and replay decode steps on a CUDA device
  // The fused GPU path: the forward's fused kernels (kv_cache.h, SlotBatch::fused_kernels) and
  // decode steps that sample inside their CUDA graph (docs/model.md). false: plain LibTorch ops.
  TORCH_ARG(bool, fused_kernels) = true;
  // With fused_kernels: q/k/v and gate/up through one GEMM each, from merged copies of their
  // weights that cost that memory once more (HFDecoderImpl::refresh_merged_projections).
  TORCH_ARG(bool, merged_projections) = true;
  // With fused_kernels: the decode steps' attention kernel (kv_cache.h, SlotBatch::decode_attention).
  TORCH_ARG(DecodeAttention, decode_attention) = DecodeAttention::split_kv;
  // Launch each decode step before the previous one's tokens reach the host, so that the host's
  // bookkeeping and the next step's launch overlap the device's work (vLLM's async scheduling; on
  // CUDA with fused_kernels; the CPU runs the same bookkeeping with nothing to overlap). Same
  // tokens either way; a request that ends on a stop token costs one more row-step, and a waiting
  // request starts one step later.
  TORCH_ARG(bool, overlap_steps) = true;
  // How the cache holds keys and values (kv_cache.h): in the model's dtype, or as fp8 e4m3 codes
  // (vLLM's kv_cache_dtype "fp8_e4m3"): half the memory and half the bytes a decode step reads
  // from it, each key and value rounded once more when stored. Attention computes in the model's
  // dtype; with fused_kernels on CUDA the split-KV kernel reads the codes itself (decode_attention
  // flash does not take them).
  TORCH_ARG(KVCacheDtype, kv_cache_dtype) = KVCacheDtype::model;
  // A request whose first tokens (at least 16) another slot has cached, running or kept, copies
  // those keys and values and prefills only the rest (vLLM's enable_prefix_caching); one that
  // shares them with a request starting in the same step waits a step for its prefill, so the n
  // samples of one prompt prefill it once. Same tokens either way, up to float rounding.
  TORCH_ARG(bool, share_prefixes) = true;
};

// Throws turnrl::Error naming the field (engine.slots, engine.capacity, engine.prefill_tokens,
// engine.kv_cache_dtype).
void validate(const GenerationEngineOptions& options);

struct GenerationRequest {
  std::vector<int64_t> tokens;  // the whole sequence so far, >= 1 token
  // max_new_tokens, temperature, top_k, top_p and stop_tokens; the rest is not used.
  SamplingOptions sampling;
  int64_t key = 0;              // the request's random stream: its n-th token uses counter_uniform(key, n)
  int64_t extends = -1;         // id of a kept request whose cached sequence this one continues; -1 = none
  bool keep = false;            // keep the sequence cached after it finishes, for a request that extends it

  GenerationRequest& prompt(std::vector<int64_t> v) { tokens = std::move(v); return *this; }
  GenerationRequest& options(SamplingOptions v) { sampling = std::move(v); return *this; }
  GenerationRequest& stream(int64_t v) { key = v; return *this; }
  GenerationRequest& continues(int64_t id) { extends = id; return *this; }
  GenerationRequest& kept(bool v = true) { keep = v; return *this; }
};

struct GenerationResult {
  int64_t id = -1;
  std::vector<int64_t> tokens;  // generated tokens, the stop token included
  std::vector<float> logp;      // log-prob of each under the distribution it was drawn from
  bool stopped = false;         // ended on a stop token (else on max_new_tokens)
  int64_t reused_tokens = 0;    // prompt tokens whose keys and values came from the extended or a shared sequence
};

// What an engine has done so far (cumulative).
struct GenerationStats {
  int64_t prefilled_tokens = 0;  // tokens run through a prefill
  int64_t reused_tokens = 0;     // prompt tokens taken from cached sequences instead (kept or shared)
  int64_t shared_tokens = 0;     // of those, copied from another slot (share_prefixes)
  int64_t decode_steps = 0;
  int64_t graph_replays = 0;     // decode steps replayed from a CUDA graph
  int64_t evictions = 0;         // kept sequences dropped to free a slot
};

class GenerationEngine {
 public:
  // The engine holds `model` (shared, not copied): parameters updated in place are seen by the
  // next step; after model->to(...) replaces them, make a new engine.
  GenerationEngine(HFDecoder model, const GenerationEngineOptions& options = {});
  ~GenerationEngine();
  GenerationEngine(const GenerationEngine&) = delete;
  GenerationEngine& operator=(const GenerationEngine&) = delete;

  // Queues a request and returns its id (0, 1, ...). Throws turnrl::Error on a bad request: empty
  // tokens, bad sampling options, more tokens than a slot holds, or extending a request that has
  // not finished or was not kept.
  int64_t add(GenerationRequest request);
  // Generates every queued request; their results in id order.
  std::vector<GenerationResult> run();
  // Drops a kept sequence (no effect when it is not, or no longer, kept).
  void release(int64_t id);
  void release_all();

  const GenerationEngineOptions& options() const;
  const GenerationStats& stats() const;
  int64_t kept_sequences() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace turnrl
