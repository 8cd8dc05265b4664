#include "turnrl/model/generation_engine.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include <torch/utils.h>

#include "turnrl/core/error.h"

#ifdef TURNRL_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include "decode_graphs.h"
#include "fused_decoder.h"
#endif

namespace turnrl {

void validate(const GenerationEngineOptions& o) {
  if (o.slots() < 1) fail("engine.slots: {}; must be >= 1", o.slots());
  if (o.capacity() < 2) fail("engine.capacity: {}; must be >= 2 (a prompt token and a generated one)", o.capacity());
  if (o.prefill_tokens() < 1) fail("engine.prefill_tokens: {}; must be >= 1", o.prefill_tokens());
  if (o.kv_cache_dtype() == KVCacheDtype::fp8_e4m3 && o.decode_attention() == DecodeAttention::flash)
    fail("engine.kv_cache_dtype: fp8_e4m3 needs engine.decode_attention split_kv (FlashAttention's kernel reads keys "
         "and values in the model's dtype only); allowed with flash: auto");
}

namespace {

// The engine's KV cache, allocated whole up front; when it does not fit, an error that says how
// large it is and which options size it (the allocator's own message names neither).
SlotKVCache slot_cache(const HFDecoder& model, const GenerationEngineOptions& o) {
  try {
    return model->make_slot_cache(o.slots(), o.capacity(), o.kv_cache_dtype());
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    // CUDA: "CUDA out of memory"; CPU: "not enough memory" or "can't allocate memory" by version.
    const bool memory = what.find("out of memory") != std::string::npos ||
                        what.find("not enough memory") != std::string::npos ||
                        what.find("allocate memory") != std::string::npos;
    if (!memory) throw;
    const HFConfig& c = model->config();
    const size_t element = o.kv_cache_dtype() == KVCacheDtype::fp8_e4m3 ? 1 : c10::elementSize(model->dtype());
    const double bytes = 2.0 * double(c.num_hidden_layers) * double(o.slots() + 1) * double(o.capacity()) *
                         double(c.num_key_value_heads * c.head_dim) * double(element);
    fail("generation engine: the KV cache of {} slots x {} tokens ({} layers x 2 x {} KV heads x {} dims, {} bytes "
         "each) needs {:.2f} GiB and does not fit on {}; lower engine.slots or engine.capacity (a trainer's "
         "model.engine.*, or the rows and max_new_tokens of its calls). The allocator said: {}",
         o.slots(), o.capacity(), c.num_hidden_layers, c.num_key_value_heads, c.head_dim, element,
         bytes / double(int64_t(1) << 30), model->device().str(), what.substr(0, what.find('\n')));
  }
}

// The next power of two >= n, starting at `smallest`, at most `largest`: the decode batch for
// `rows` leading slots (1 .. slots), and the cached positions a step reads (64 .. capacity), so a
// few graphs serve every batch size and sequence length. Reading the next power of two past the
// longest sequence costs at most twice its keys, where the whole capacity would cost capacity / length.
int64_t bucket_for(int64_t n, int64_t smallest, int64_t largest) {
  int64_t bucket = smallest;
  while (bucket < n) bucket *= 2;
  return std::min(bucket, largest);
}

// The sampling parameters of a step's rows as one int64 host buffer [kSamplingFields, rows], with
// temperature and top-p as their float64 bits, so that they cross to the device in one transfer
// (with the decode inputs, in a graph step). Idle rows sample nothing: temperature and top-p 1.
enum SamplingField : int64_t { top_k_field, key_field, counter_field, temperature_field, top_p_field, kSamplingFields };

struct PackedSampling {
  explicit PackedSampling(int64_t rows) : rows(rows), values(size_t(kSamplingFields * rows), 0) {
    for (int64_t row = 0; row < rows; ++row) at(temperature_field, row) = at(top_p_field, row) = bits(1.0);
  }
  // Row `row` draws as `o` says, from the random stream (key, counter).
  void set(int64_t row, const SamplingOptions& o, int64_t key, int64_t counter) {
    at(top_k_field, row) = o.top_k;
    at(key_field, row) = key;
    at(counter_field, row) = counter;
    at(temperature_field, row) = bits(o.temperature);
    at(top_p_field, row) = bits(o.top_p);
    filtered = filtered || o.top_k > 0 || o.top_p < 1;
  }
  int64_t& at(SamplingField field, int64_t row) { return values[size_t(field * rows + row)]; }
  static int64_t bits(double v) {
    int64_t b = 0;
    std::memcpy(&b, &v, sizeof b);
    return b;
  }

  int64_t rows;
  std::vector<int64_t> values;
  bool filtered = false;  // some row has top-k or top-p
};

// The draw of each row of logits [R, V] from PackedSampling's fields (int64 [kSamplingFields, R] on
// the logits' device): {token, log-prob} as float64 [2, R], one tensor for one transfer back (token
// ids are exact in float64).
torch::Tensor draw_packed(const torch::Tensor& logits, const torch::Tensor& fields, bool filtered, bool fused) {
  const torch::Tensor shaping = fields.narrow(0, temperature_field, 2).view(torch::kDouble).to(torch::kFloat);
  const torch::Tensor uniform = counter_uniform(fields[key_field], fields[counter_field]);
#ifdef TURNRL_WITH_CUDA
  // Without top-k or top-p, one kernel a row instead of a dozen LibTorch ops over the vocabulary.
  if (fused && !filtered && detail::fused_kernels_supported(logits)) {
    const auto [token, logp] = detail::fused_sample_unfiltered(logits, shaping[0], uniform);
    return torch::stack({token.to(torch::kDouble), logp.to(torch::kDouble)});
  }
#else
  (void)fused;
#endif
  RowSampling sampling;
  sampling.temperature = shaping[0];
  sampling.top_k = fields[top_k_field];
  sampling.top_p = shaping[1];
  sampling.filtered = filtered;
  const auto [token, logp] = draw_tokens(logits, sampling, uniform);
  return torch::stack({token.to(torch::kDouble), logp.to(torch::kDouble)});
}

int64_t common_prefix(const std::vector<int64_t>& a, size_t a_length, const std::vector<int64_t>& b) {
  const size_t n = std::min(a_length, b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return int64_t(i);
}

}  // namespace

struct GenerationEngine::State {
  enum class Use { free, running, kept };
  struct Slot {
    Use use = Use::free;
    int64_t owner = -1;             // the running or kept request
    std::vector<int64_t> sequence;  // every token; while running the last one is not cached yet
    int64_t cached = 0;             // positions 0 .. cached-1 hold keys and values
    int64_t last_used = 0;          // for evicting kept sequences, least recently used first
  };
  struct Request {
    GenerationRequest request;
    GenerationResult result;
    int64_t slot = -1;
    bool done = false;
  };

  HFDecoder model;
  GenerationEngineOptions options;
  SlotKVCache cache;
  torch::Device device;
  std::vector<Slot> slots;
  std::map<int64_t, Request> requests;  // added and not yet returned by run()
  std::deque<int64_t> waiting;
  std::map<int64_t, int64_t> kept;      // request id -> slot
  std::set<int64_t> finished_ids;       // every request that has finished (extends() targets)
  int64_t next_id = 0, clock = 0;
  GenerationStats stats;
#ifdef TURNRL_WITH_CUDA
  std::unique_ptr<detail::DecodeGraphs> graphs;
  int64_t merged_placements = -1;  // the model's merged_placements() when the graphs were captured
#endif

  State(HFDecoder m, const GenerationEngineOptions& o)
      : model(std::move(m)), options(o), cache(slot_cache(model, o)), device(model->device()), slots(size_t(o.slots())) {
#ifdef TURNRL_WITH_CUDA
    if (o.cuda_graphs() && device.is_cuda()) graphs = std::make_unique<detail::DecodeGraphs>();
#endif
  }

  bool merged() const { return options.fused_kernels() && options.merged_projections(); }

  torch::Tensor to_device(const std::vector<int64_t>& values) const {
    return torch::tensor(values, torch::kLong).to(device);
  }

  // Equal-length rows copied to the device in one transfer (a step's small inputs): [rows.size(), n].
  template <typename T>
  torch::Tensor rows_to_device(const std::vector<std::vector<T>>& rows, torch::Dtype dtype) const {
    std::vector<T> flat;
    for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
    return torch::tensor(flat, dtype).view({int64_t(rows.size()), -1}).to(device);
  }

  // logits [R, V] of one token in each of slots 0 .. R-1 (idle where count is 0).
  torch::Tensor decode_logits(const torch::Tensor& tokens, const torch::Tensor& start, const torch::Tensor& count,
                              int64_t read_width) {
    SlotBatch batch;
    batch.slot = torch::arange(tokens.size(0), torch::TensorOptions(torch::kLong).device(device));
    batch.start = start;
    batch.count = count;
    batch.read_width = read_width;
    batch.leading_slots = true;
    batch.fused_kernels = options.fused_kernels();
    batch.merged_projections = merged();
    batch.decode_attention = options.decode_attention();
    return model->logits(model->slot_hidden(tokens.unsqueeze(1), batch, cache).select(1, 0));
  }

  // The first `tokens` cached positions of slot `from`, copied to slot `to` (share_prefixes).
  struct PrefixCopy {
    int64_t from, to, tokens;
  };
  // A copy shorter than this is not worth a request's wait for its leader's prefill.
  static constexpr int64_t kMinSharedPrefix = 16;

  // Every copy as one gather and one scatter of each layer's keys and values: all sources are read
  // before any target is written. A copy never reads a slot taken in the same step (donors are
  // slots cached before it), though it may read one that a later request took by eviction.
  void copy_prefixes(const std::vector<PrefixCopy>& copies) {
    if (copies.empty()) return;
    const int64_t capacity = options.capacity();
    std::vector<int64_t> from, to;
    for (const PrefixCopy& c : copies) {
      for (int64_t t = 0; t < c.tokens; ++t) {
        from.push_back(c.from * capacity + t);
        to.push_back(c.to * capacity + t);
      }
    }
    const torch::Tensor source = to_device(from), target = to_device(to);
    for (std::vector<torch::Tensor>* part : {&cache.keys, &cache.values})
      for (torch::Tensor& layer : *part) {
        const torch::Tensor rows = layer.view({-1, layer.size(2), layer.size(3)});
        rows.index_copy_(0, target, rows.index_select(0, source));
      }
  }

  // A slot for request `id`: the one its extended sequence is kept in, else a free one, else the
  // least recently used kept one that no waiting request extends (then any kept one); -1 = none.
  int64_t take_slot(int64_t id) {
    const GenerationRequest& r = requests.at(id).request;
    const auto own = kept.find(r.extends);
    if (own != kept.end()) {
      const int64_t slot = own->second;
      kept.erase(own);
      return slot;
    }
    for (size_t s = 0; s < slots.size(); ++s)
      if (slots[s].use == Use::free) return int64_t(s);
    std::set<int64_t> wanted;
    for (int64_t w : waiting) wanted.insert(requests.at(w).request.extends);
    int64_t victim = -1;
    for (bool spare_wanted : {true, false}) {
      for (const auto& [owner, slot] : kept)
        if (!(spare_wanted && wanted.count(owner)) && (victim < 0 || slots[size_t(slot)].last_used < slots[size_t(victim)].last_used))
          victim = slot;
      if (victim >= 0) break;
    }
    if (victim < 0) return -1;
    kept.erase(slots[size_t(victim)].owner);
    ++stats.evictions;
    return victim;
  }

  // Starts waiting requests in free slots (up to the prefill budget) and prefills them together:
  // their rows' next-token logits [n, V] and the request ids, in row order.
  std::pair<torch::Tensor, std::vector<int64_t>> prefill_waiting() {
    std::vector<int64_t> admitted, slot_of, start, count;
    std::vector<std::vector<int64_t>> fresh;
    std::vector<char> taken(slots.size(), 0);  // slots that requests of this step took
    std::vector<PrefixCopy> copies;
    int64_t budget = options.prefill_tokens();
    for (auto it = waiting.begin(); it != waiting.end();) {
      const int64_t id = *it;
      Request& q = requests.at(id);
      const std::vector<int64_t>& tokens = q.request.tokens;
      const int64_t most = int64_t(tokens.size()) - 1;  // the last token always runs: its logits
      // The tokens whose keys and values a slot's cache holds for this request.
      const auto cached_prefix = [&](const Slot& slot) {
        return std::min(common_prefix(slot.sequence, size_t(slot.cached), tokens), most);
      };
      const auto own = kept.find(q.request.extends);
      int64_t reuse = own == kept.end() ? 0 : cached_prefix(slots[size_t(own->second)]);
      // Another slot's cached prefix (share_prefixes): copied, where it is longer than the own one.
      int64_t donor = -1, shared = 0;
      if (options.share_prefixes()) {
        for (size_t s = 0; s < slots.size(); ++s) {
          if (slots[s].use == Use::free || taken[s]) continue;
          const int64_t length = cached_prefix(slots[s]);
          if (length > shared) donor = int64_t(s), shared = length;
        }
        if (shared < kMinSharedPrefix || shared <= reuse) donor = -1, shared = 0;
        // A request admitted in this step holds a longer prefix once it is prefilled: wait a step
        // for it (the n samples of one prompt prefill it once).
        int64_t leader = 0;
        for (int64_t a : admitted) {
          const std::vector<int64_t>& other = requests.at(a).request.tokens;
          leader = std::max(leader, std::min(common_prefix(other, other.size(), tokens), most));
        }
        if (leader >= kMinSharedPrefix && leader > std::max(reuse, shared)) {
          ++it;
          continue;
        }
      }
      const int64_t new_tokens = int64_t(tokens.size()) - std::max(reuse, shared);
      if (!admitted.empty() && new_tokens > budget) break;
      const int64_t slot = take_slot(id);
      if (slot < 0) break;
      it = waiting.erase(it);
      taken[size_t(slot)] = 1;
      if (donor >= 0) {
        // Copied before this step's prefill writes anything; a donor evicted for this very request
        // already holds the prefix in place.
        if (donor != slot) copies.push_back({donor, slot, shared});
        reuse = shared;
        stats.shared_tokens += shared;
      }
      budget -= new_tokens;
      Slot& s = slots[size_t(slot)];
      s.use = Use::running;
      s.owner = id;
      s.sequence = tokens;
      s.cached = int64_t(s.sequence.size());
      s.last_used = ++clock;
      q.slot = slot;
      q.result.reused_tokens = reuse;
      admitted.push_back(id);
      slot_of.push_back(slot);
      start.push_back(reuse);
      count.push_back(new_tokens);
      fresh.emplace_back(tokens.begin() + reuse, tokens.end());
      stats.prefilled_tokens += new_tokens;
      stats.reused_tokens += reuse;
    }
    copy_prefixes(copies);
    if (admitted.empty()) return {};
    const int64_t width = *std::max_element(count.begin(), count.end());
    std::vector<int64_t> padded;
    for (const auto& row : fresh) {
      padded.insert(padded.end(), row.begin(), row.end());
      padded.insert(padded.end(), size_t(width) - row.size(), 0);
    }
    const torch::Tensor placement = rows_to_device<int64_t>({slot_of, start, count}, torch::kLong);
    SlotBatch batch;
    batch.fused_kernels = options.fused_kernels();
    batch.merged_projections = merged();
    batch.decode_attention = options.decode_attention();
    batch.slot = placement[0];
    batch.start = placement[1];
    batch.count = placement[2];
    for (size_t i = 0; i < admitted.size(); ++i) batch.read_width = std::max(batch.read_width, start[i] + count[i]);
    const torch::Tensor tokens = to_device(padded).view({int64_t(admitted.size()), width});
    const torch::Tensor hidden = model->slot_hidden(tokens, batch, cache);
    const torch::Tensor last = hidden.gather(1, (batch.count - 1).view({-1, 1, 1}).expand({-1, 1, hidden.size(2)}));
    return {model->logits(last.squeeze(1)), admitted};
  }

  // One decode step of every running request that has sampled a token not yet cached: their next-token logits and ids.
  std::pair<torch::Tensor, std::vector<int64_t>> decode_running(const std::set<int64_t>& exclude) {
    std::vector<int64_t> ids, rows_of;
    int64_t used = 0;
    for (size_t s = 0; s < slots.size(); ++s)
      if (slots[s].use == Use::running && !exclude.count(slots[s].owner)) {
        ids.push_back(slots[s].owner);
        rows_of.push_back(int64_t(s));
        used = int64_t(s) + 1;
      }
    if (ids.empty()) return {};
#ifdef TURNRL_WITH_CUDA
    const int64_t rows = graphs ? bucket_for(used, 1, options.slots()) : used;
#else
    const int64_t rows = used;
#endif
    std::vector<int64_t> tokens(size_t(rows), 0), start(size_t(rows), 0), count(size_t(rows), 0);
    int64_t read_width = 1;
    for (int64_t s : rows_of) {
      Slot& slot = slots[size_t(s)];
      tokens[size_t(s)] = slot.sequence.back();
      start[size_t(s)] = slot.cached;
      count[size_t(s)] = 1;
      read_width = std::max(read_width, slot.cached + 1);
      ++slot.cached;
    }
    ++stats.decode_steps;
    const torch::Tensor inputs = rows_to_device<int64_t>({tokens, start, count}, torch::kLong);
    torch::Tensor logits;
#ifdef TURNRL_WITH_CUDA
    if (graphs) {
      const int64_t width = bucket_for(read_width, 64, options.capacity());
      logits = graphs->run({kLogitsGraph, rows, width}, {inputs}, device, [this, width](const std::vector<torch::Tensor>& in) {
        return decode_logits(in[0][0], in[0][1], in[0][2], width);
      });
      ++stats.graph_replays;
    }
#endif
    if (!logits.defined()) logits = decode_logits(inputs[0], inputs[1], inputs[2], read_width);
    // Running slots are taken lowest first, so they are usually rows 0 .. n-1 of the step: a view.
    const bool leading = rows_of.back() == int64_t(rows_of.size()) - 1;
    return {leading ? logits.narrow(0, 0, int64_t(rows_of.size())) : logits.index_select(0, to_device(rows_of)), ids};
  }

  // What a captured decode step computes (part of its graph's key).
  static constexpr int64_t kLogitsGraph = 0, kSampleGraph = 1, kSampleFilteredGraph = 2;

  // A decode step launched on the device whose tokens the host has not recorded yet.
  struct InFlight {
    std::vector<int64_t> slots, owners;  // its live rows: slot and the request that ran in it
    int64_t rows = 0;                    // the step's rows (on graphs, a batch-size bucket)
    torch::Tensor drawn;                 // the step's output on the device: float64 [2, rows]
    torch::Tensor host;                  // its copy in host memory (on CUDA complete once `copied` has passed)
#ifdef TURNRL_WITH_CUDA
    at::cuda::CUDAEvent copied;
#endif
  };
  std::unique_ptr<InFlight> in_flight;
  torch::Tensor no_previous;  // float64 [slots] zeros: the previous tokens of a step with none in flight

  // Whether decode steps without prefill run through launch_step() and retire(): with
  // overlap_steps; on CUDA only with fused_kernels (the plain path keeps sampling outside its
  // graphs), and there also without overlap_steps when on graphs (one replay for the forward and
  // the draw).
  bool steps_launched() const {
    if (!device.is_cuda()) return options.overlap_steps();
    return options.fused_kernels() && (graphed() || options.overlap_steps());
  }

  // A decode step of every running slot, its forward and the draw of each row's next token as one
  // function (one graph replay on CUDA graphs), its inputs sent in one transfer and its tokens and
  // log-probs copied back in one without waiting for them. Draws what decode_running() +
  // sample_rows() draw.
  //
  // With a step in flight it is launched before that step's tokens reach the host: a row of the
  // in-flight step takes its input token from that step's output on the device, its position and
  // random counter one past it. A row that will end with the in-flight token on max_new_tokens is
  // left out; one that ends on a stop token runs once more, and retire() drops that row's result.
  // Null when no row is left to run.
  std::unique_ptr<InFlight> launch_step() {
    auto step = std::make_unique<InFlight>();
    std::vector<char> in_previous(slots.size(), 0);  // whether a slot's row is in the in-flight step
    if (in_flight)
      for (int64_t s : in_flight->slots) in_previous[size_t(s)] = 1;
    const auto pending = [&](int64_t s) { return int64_t(in_previous[size_t(s)]); };
    for (size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].use != Use::running) continue;
      const Request& q = requests.at(slots[s].owner);
      if (int64_t(q.result.tokens.size()) + pending(int64_t(s)) >= q.request.sampling.max_new_tokens) continue;
      step->slots.push_back(int64_t(s));
      step->owners.push_back(slots[s].owner);
    }
    if (step->slots.empty()) return nullptr;
    const bool on_graphs = graphed();
    const int64_t used = step->slots.back() + 1;
    const int64_t rows = step->rows = on_graphs ? bucket_for(used, 1, options.slots()) : used;
    // One int64 buffer [3 + kSamplingFields, rows]: each row's token (-1: the in-flight step's),
    // start and count (idle rows: count 0), then its PackedSampling fields.
    std::vector<int64_t> decode(size_t(3 * rows), 0);
    PackedSampling sampling(rows);
    int64_t read_width = 1;
    for (int64_t s : step->slots) {
      Slot& slot = slots[size_t(s)];
      const Request& q = requests.at(slot.owner);
      const int64_t from_device = pending(s);
      decode[size_t(s)] = from_device ? -1 : slot.sequence.back();
      decode[size_t(rows + s)] = slot.cached;
      decode[size_t(2 * rows + s)] = 1;
      sampling.set(s, q.request.sampling, q.request.key, int64_t(q.result.tokens.size()) + from_device);
      read_width = std::max(read_width, slot.cached + 1);
      ++slot.cached;
    }
    ++stats.decode_steps;
    decode.insert(decode.end(), sampling.values.begin(), sampling.values.end());
    // On CUDA in pinned memory: one asynchronous transfer into the graph's (or the step's) input.
    const torch::Tensor inputs = torch::empty({3 + kSamplingFields, rows},
                                              torch::TensorOptions(torch::kLong).pinned_memory(device.is_cuda()));
    std::memcpy(inputs.data_ptr<int64_t>(), decode.data(), decode.size() * sizeof(int64_t));
    // The in-flight step's rows are a prefix of its own rows (no slot starts while a step is in
    // flight), so its first `rows` draws line up with this step's rows.
    if (!no_previous.defined()) no_previous = torch::zeros({options.slots()}, torch::TensorOptions(torch::kDouble).device(device));
    const torch::Tensor previous = (in_flight ? in_flight->drawn[0] : no_previous).narrow(0, 0, rows);
    const bool filtered = sampling.filtered;
    const auto forward_and_draw = [this, filtered](const std::vector<torch::Tensor>& in, int64_t width) {
      const torch::Tensor& x = in[0];
      const torch::Tensor tokens = torch::where(x[0] < 0, in[1].to(torch::kLong), x[0]);
      return draw_packed(decode_logits(tokens, x[1], x[2], width), x.narrow(0, 3, kSamplingFields), filtered,
                         options.fused_kernels());
    };
#ifdef TURNRL_WITH_CUDA
    if (on_graphs) {
      const int64_t width = bucket_for(read_width, 64, options.capacity());
      step->drawn = graphs->run({filtered ? kSampleFilteredGraph : kSampleGraph, rows, width}, {inputs, previous}, device,
                                [&](const std::vector<torch::Tensor>& in) { return forward_and_draw(in, width); });
      ++stats.graph_replays;
    }
#endif
    if (!step->drawn.defined()) step->drawn = forward_and_draw({inputs.to(device, /*non_blocking=*/true), previous}, read_width);
#ifdef TURNRL_WITH_CUDA
    if (device.is_cuda()) {
      // A graph's output is overwritten by the next replay of its key: copied out at once.
      step->host = torch::empty({2, rows}, torch::TensorOptions(torch::kDouble).pinned_memory(true));
      step->host.copy_(step->drawn, /*non_blocking=*/true);
      step->copied.record(c10::cuda::getCurrentCUDAStream(device.index()));
      return step;
    }
#endif
    step->host = step->drawn;
    return step;
  }

  // Waits for a launched step's tokens and records them (rows whose request has ended meanwhile: dropped).
  void retire(InFlight& step) {
#ifdef TURNRL_WITH_CUDA
    if (device.is_cuda()) step.copied.synchronize();
#endif
    const double* t = step.host.data_ptr<double>();
    for (size_t i = 0; i < step.slots.size(); ++i) {
      const int64_t s = step.slots[i];
      if (requests.at(step.owners[i]).done) continue;
      record(step.owners[i], int64_t(t[s]), float(t[step.rows + s]));
    }
  }

  // Launches the next decode step, then records the one in flight (overlap_steps), or launches
  // and records one step.
  void decode_launched() {
    std::unique_ptr<InFlight> next = launch_step();
    if (in_flight) retire(*in_flight);
    in_flight = std::move(next);
    if (!options.overlap_steps()) finish_in_flight();
  }

  void finish_in_flight() {
    if (!in_flight) return;
    std::unique_ptr<InFlight> step = std::move(in_flight);
    retire(*step);
  }

  // Whether decode steps replay CUDA graphs.
  bool graphed() const {
#ifdef TURNRL_WITH_CUDA
    return graphs != nullptr;
#else
    return false;
#endif
  }

  // Samples one token for each row of logits (request ids in row order) and records it.
  void sample_rows(const torch::Tensor& logits, const std::vector<int64_t>& ids) {
    const int64_t rows = int64_t(ids.size());
    PackedSampling sampling(rows);
    for (int64_t i = 0; i < rows; ++i) {
      const Request& q = requests.at(ids[size_t(i)]);
      sampling.set(i, q.request.sampling, q.request.key, int64_t(q.result.tokens.size()));
    }
    const torch::Tensor fields = torch::tensor(sampling.values, torch::kLong).view({kSamplingFields, rows}).to(device);
    // One transfer each way, so one wait for the device.
    const torch::Tensor host = draw_packed(logits, fields, sampling.filtered, options.fused_kernels()).cpu();
    const double* t = host.data_ptr<double>();
    for (int64_t i = 0; i < rows; ++i) record(ids[size_t(i)], int64_t(t[i]), float(t[rows + i]));
  }

  // Appends a drawn token to request `id`; finishes it at a stop token or max_new_tokens.
  void record(int64_t id, int64_t token, float logp) {
    Request& q = requests.at(id);
    const SamplingOptions& o = q.request.sampling;
    q.result.tokens.push_back(token);
    q.result.logp.push_back(logp);
    slots[size_t(q.slot)].sequence.push_back(token);
    q.result.stopped = std::find(o.stop_tokens.begin(), o.stop_tokens.end(), token) != o.stop_tokens.end();
    if (q.result.stopped || int64_t(q.result.tokens.size()) == o.max_new_tokens) finish(id);
  }

  void finish(int64_t id) {
    Request& q = requests.at(id);
    q.done = true;
    finished_ids.insert(id);
    Slot& slot = slots[size_t(q.slot)];
    // The last token is not cached, as while running, also when a step launched before its
    // request ended wrote it (overlap_steps).
    slot.cached = int64_t(slot.sequence.size()) - 1;
    if (q.request.keep) {
      slot.use = Use::kept;
      kept[id] = q.slot;
    } else {
      slot = Slot();
    }
  }

  // Whether run() has work left: a request to start or to advance, or a step to record.
  bool busy() const { return in_flight || !waiting.empty() || any_running(); }

  // Whether a waiting request could take a slot now (a free one, or a kept one to evict).
  bool slot_available() const {
    return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.use != Use::running; });
  }

  bool any_running() const {
    return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.use == Use::running; });
  }
};

GenerationEngine::GenerationEngine(HFDecoder model, const GenerationEngineOptions& options) {
  validate(options);
  state_ = std::make_unique<State>(std::move(model), options);
}

GenerationEngine::~GenerationEngine() = default;

int64_t GenerationEngine::add(GenerationRequest request) {
  State& st = *state_;
  validate(request.sampling);
  if (request.tokens.empty()) fail("GenerationRequest.tokens: empty; a request needs at least one token");
  const int64_t vocab = st.model->config().vocab_size;
  for (int64_t t : request.tokens)
    if (t < 0 || t >= vocab) fail("GenerationRequest.tokens: token {} is outside the vocabulary [0, {})", t, vocab);
  const int64_t needed = int64_t(request.tokens.size()) + request.sampling.max_new_tokens - 1;
  if (needed > st.options.capacity())
    fail("GenerationRequest: {} tokens + max_new_tokens {} need {} cached positions; engine.capacity is {}",
         request.tokens.size(), request.sampling.max_new_tokens, needed, st.options.capacity());
  if (request.extends >= 0 && !st.finished_ids.count(request.extends))
    fail("GenerationRequest.extends: request {} has not finished (or does not exist); only a finished, kept request "
         "can be extended",
         request.extends);
  const int64_t id = st.next_id++;
  st.requests[id].request = std::move(request);
  st.requests[id].result.id = id;
  st.waiting.push_back(id);
  return id;
}

std::vector<GenerationResult> GenerationEngine::run() {
  State& st = *state_;
  torch::NoGradGuard no_grad;
  // Captured decode graphs read the merged copies: bring them up to date with the parameters, and
  // drop the graphs when a copy moved (a LoRA adapter added, the copies cleared or re-made).
  if (st.merged()) {
    st.model->refresh_merged_projections();
#ifdef TURNRL_WITH_CUDA
    const int64_t placements = st.model->merged_placements();
    if (st.graphs && placements != st.merged_placements) st.graphs = std::make_unique<detail::DecodeGraphs>();
    st.merged_placements = placements;
#endif
  }
  while (st.busy()) {
    // While a step is in flight the host does not know its tokens yet: a request that could start
    // waits for them (a prefill and the steps after it read each sequence's last token on the host).
    if (st.in_flight) {
      if (!st.waiting.empty() && st.slot_available()) st.finish_in_flight();
      else st.decode_launched();
      continue;
    }
    // Requests prefilled this step sample their first token from the prefill's logits; the ones
    // already running advance by one token. One sampling call serves both.
    auto [prefill_logits, prefilled] = st.prefill_waiting();
    if (prefilled.empty() && st.steps_launched() && st.any_running()) {
      st.decode_launched();
      continue;
    }
    const std::set<int64_t> just_started(prefilled.begin(), prefilled.end());
    auto [decoded_logits, decoded] = st.decode_running(just_started);
    std::vector<torch::Tensor> logits;
    std::vector<int64_t> ids;
    for (auto* part : {&prefill_logits, &decoded_logits})
      if (part->defined()) logits.push_back(*part);
    ids.insert(ids.end(), prefilled.begin(), prefilled.end());
    ids.insert(ids.end(), decoded.begin(), decoded.end());
    if (ids.empty()) fail("GenerationEngine: no request could start (internal error: no free or kept slot)");
    st.sample_rows(logits.size() == 1 ? logits.front() : torch::cat(logits), ids);
  }
  std::vector<GenerationResult> results;
  for (auto& [id, q] : st.requests) results.push_back(std::move(q.result));
  st.requests.clear();
  return results;
}

void GenerationEngine::release(int64_t id) {
  State& st = *state_;
  const auto it = st.kept.find(id);
  if (it == st.kept.end()) return;
  st.slots[size_t(it->second)] = State::Slot();
  st.kept.erase(it);
}

void GenerationEngine::release_all() {
  while (!state_->kept.empty()) release(state_->kept.begin()->first);
}

const GenerationEngineOptions& GenerationEngine::options() const { return state_->options; }
const GenerationStats& GenerationEngine::stats() const { return state_->stats; }
int64_t GenerationEngine::kept_sequences() const { return int64_t(state_->kept.size()); }

}  // namespace turnrl
