#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "model/generation_requests.h"
#include "model/hf_fixtures.h"
#include "turnrl/core/error.h"
#include "turnrl/model/generation_engine.h"

using namespace turnrl;
using namespace turnrl::test;

namespace {

GenerationResult run_alone(HFDecoder model, const GenerationRequest& request, int64_t capacity = 256) {
  GenerationEngine engine(model, GenerationEngineOptions().slots(1).capacity(capacity));
  engine.add(request);
  return engine.run().front();
}

// splitmix64's n-th output from `key`, top 53 bits as (0, 1]: the scalar reference of counter_uniform.
double splitmix_uniform(uint64_t key, uint64_t n) {
  uint64_t z = key + (n + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return double((z >> 11) + 1) * std::ldexp(1.0, -53);
}

// The sampling distribution of one row by plain loops in double: temperature, top-k (ties with the
// k-th kept), top-p over the renormalised survivors (most likely first, keep while the mass before
// a token is below p).
std::vector<double> scalar_sampling_log_probs(const std::vector<double>& logits, double temperature, int64_t top_k,
                                              double top_p) {
  const size_t n = logits.size();
  const double t = temperature == 0 ? 1.0 : temperature;
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = logits[i] / t;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] > x[b]; });
  std::vector<bool> kept(n, true);
  if (temperature > 0 && top_k > 0 && size_t(top_k) < n)
    for (size_t i = 0; i < n; ++i) kept[i] = x[i] >= x[order[size_t(top_k) - 1]];
  if (temperature > 0 && top_p < 1) {
    double total = 0;
    for (size_t i = 0; i < n; ++i)
      if (kept[i]) total += std::exp(x[i]);
    double before = 0;
    for (size_t i : order) {
      if (!kept[i]) continue;
      if (before / total >= top_p) kept[i] = false;
      before += std::exp(x[i]);
    }
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i)
    if (kept[i]) total += std::exp(x[i]);
  std::vector<double> out(n, -INFINITY);
  for (size_t i = 0; i < n; ++i)
    if (kept[i]) out[i] = x[i] - std::log(total);
  return out;
}

}  // namespace

TEST_CASE("generation_engine: counter_uniform equals splitmix64 computed on scalars", "[model]") {
  const std::vector<int64_t> keys = {0, 1, 42, -1, std::numeric_limits<int64_t>::min(), 0x123456789abcdefLL};
  const std::vector<int64_t> counters = {0, 1, 7, 1000000, 3, 0};
  const torch::Tensor u = counter_uniform(torch::tensor(keys, torch::kLong), torch::tensor(counters, torch::kLong));
  for (size_t i = 0; i < keys.size(); ++i) {
    const double want = splitmix_uniform(uint64_t(keys[i]), uint64_t(counters[i]));
    CHECK(u[int64_t(i)].item<double>() == want);
    CHECK(want > 0);
    CHECK(want <= 1);
  }
}

TEST_CASE("generation_engine: per-row temperature, top-k and top-p equal a scalar reference", "[model]") {
  // Small vocabularies with ties (top-k keeps every token tied with the k-th) and rows that differ.
  const std::vector<std::vector<double>> logits = {{2.0, 1.0, 1.0, 0.5, -1.0, 0.0, 1.0},
                                                   {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7},
                                                   {3.0, -2.0, 0.0, 0.0, 1.5, 2.5, -0.5},
                                                   {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0},
                                                   {-1.0, 4.0, 0.0, 2.0, 2.0, 1.0, 0.5}};
  const std::vector<double> temperature = {1.0, 0.5, 0.0, 2.0, 0.8};
  const std::vector<int64_t> top_k = {2, 0, 3, 4, 7};
  const std::vector<double> top_p = {1.0, 0.6, 0.5, 0.9, 0.35};
  RowSampling rows;
  rows.temperature = torch::tensor(temperature, torch::kDouble).to(torch::kFloat);
  rows.top_k = torch::tensor(top_k, torch::kLong);
  rows.top_p = torch::tensor(top_p, torch::kDouble).to(torch::kFloat);
  torch::Tensor x = torch::empty({5, 7}, torch::kFloat);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t v = 0; v < 7; ++v) x[r][v] = logits[size_t(r)][size_t(v)];
  const torch::Tensor got = sampling_log_probs(x, rows);
  for (size_t r = 0; r < logits.size(); ++r) {
    INFO("row " << r);
    const std::vector<double> want = scalar_sampling_log_probs(logits[r], temperature[r], top_k[r], top_p[r]);
    for (size_t v = 0; v < want.size(); ++v) {
      const double g = got[int64_t(r)][int64_t(v)].item<double>();
      if (std::isinf(want[v]))
        CHECK(std::isinf(g));
      else
        CHECK(g == Approx(want[v]).margin(1e-5));
    }
  }
  // Inverse CDF: the first token whose cumulative probability reaches u; greedy rows take the argmax.
  const std::vector<double> uniforms = {0.05, 0.5, 0.99, 1.0, 0.7};
  const auto [token, logp] = draw_tokens(x, rows, torch::tensor(uniforms, torch::kDouble));
  for (size_t r = 0; r < logits.size(); ++r) {
    INFO("row " << r);
    const std::vector<double> lp = scalar_sampling_log_probs(logits[r], temperature[r], top_k[r], top_p[r]);
    size_t want = 0;
    if (temperature[r] == 0) {
      want = size_t(std::max_element(logits[r].begin(), logits[r].end()) - logits[r].begin());
    } else {
      double cdf = 0;
      for (want = 0; want < lp.size(); ++want) {
        cdf += std::exp(lp[want]);
        if (cdf >= uniforms[r] - 1e-9 && !std::isinf(lp[want])) break;
      }
    }
    CHECK(token[int64_t(r)].item<int64_t>() == int64_t(want));
    CHECK(logp[int64_t(r)].item<double>() == Approx(lp[want]).margin(1e-5));
  }
}

TEST_CASE("generation_engine: cached greedy generation equals uncached generation, Qwen2, Qwen3 and Llama-3", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);
    const HFReference reference = read_hf_reference(family);
    auto policy = load_fixture(family);
    const auto [prompts, mask] = left_pad(reference.prompts, 0);
    const SamplingOptions greedy = SamplingOptions().max_new(24).temp(0);
    const Rollout cached = policy->generate(prompts, mask, greedy);
    const Rollout uncached = policy->generate(prompts, mask, SamplingOptions(greedy).cache(false));
    CHECK(torch::equal(cached.tokens, uncached.tokens));
    CHECK(torch::equal(cached.response_mask, uncached.response_mask));
    CHECK((cached.logp - uncached.logp).abs().max().item<double>() < 1e-4);
    // And each row token for token against transformers' greedy continuation.
    for (size_t i = 0; i < reference.prompts.size(); ++i) {
      const torch::Tensor row = cached.tokens[int64_t(i)].narrow(0, cached.prompt_length, 24).contiguous();
      CHECK(std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + 24) ==
            std::vector<int64_t>(reference.greedy[i].begin(), reference.greedy[i].begin() + 24));
    }
  }
}

TEST_CASE("generation_engine: sampled rollouts equal the uncached sampler for the same seed", "[model]") {
  auto policy = load_fixture("qwen3");
  const auto [prompts, mask] = left_pad({{5, 6, 7}, {9, 10, 11, 12, 13, 14}, {3}}, 0);
  for (const SamplingOptions& o : {SamplingOptions().max_new(10).rng_seed(11),
                                   SamplingOptions().max_new(10).rng_seed(12).topk(6).temp(0.8),
                                   SamplingOptions().max_new(10).rng_seed(13).topp(0.7).stop({4, 5, 6, 7, 8, 9, 10})}) {
    const Rollout cached = policy->generate(prompts, mask, o);
    const Rollout uncached = policy->generate(prompts, mask, SamplingOptions(o).cache(false));
    CHECK(torch::equal(cached.tokens, uncached.tokens));
    CHECK(torch::equal(cached.num_generated, uncached.num_generated));
    CHECK((cached.logp - uncached.logp).abs().max().item<double>() < 1e-4);
    CHECK(cached.logp.abs().sum().item<double>() > 0.5);  // sampled, not degenerate
  }
}

TEST_CASE("generation_engine: continuous batching with ragged requests equals one-at-a-time generation", "[model]") {
  for (const std::string& family : {"qwen2", "llama"}) {
    INFO(family);
    auto policy = load_fixture(family);
    const std::vector<GenerationRequest> requests = mixed_requests();
    // Two slots for six requests: finished ones free their slot and waiting ones start mid-run;
    // a small prefill budget splits the admissions over several steps.
    GenerationEngine engine(policy->model(), GenerationEngineOptions().slots(2).capacity(64).prefill_tokens(6));
    for (const GenerationRequest& r : requests) engine.add(r);
    const std::vector<GenerationResult> together = engine.run();
    REQUIRE(together.size() == requests.size());
    CHECK(engine.stats().decode_steps < int64_t(9 + 14 + 9 + 4 + 12 + 9));  // requests shared decode steps
    for (size_t i = 0; i < requests.size(); ++i) {
      INFO("request " << i);
      CHECK(together[i].id == int64_t(i));
      check_same(together[i], run_alone(policy->model(), requests[i]));
    }
    CHECK(together[0].tokens.size() == 9);
    CHECK(together[3].tokens.size() == 4);
  }
}

TEST_CASE("generation_engine: overlapped decode steps draw what one step at a time draws", "[model]") {
  // On the CPU a step runs as it is launched; what this checks is the bookkeeping of a step
  // launched before the previous one's tokens are recorded (the GPU case runs it on graphs).
  for (const std::string& family : hf_families()) {
    INFO(family);
    auto policy = load_fixture(family);
    check_overlap_equals_stepping(policy->model());
  }
}

TEST_CASE("generation_engine: merged projections equal separate ones and follow in-place parameter updates", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);  // qwen2: q/k/v biases; qwen3: q/k norms; llama: neither
    auto policy = load_fixture(family);
    const std::vector<GenerationRequest> requests = mixed_requests();
    GenerationEngine merged(policy->model(), GenerationEngineOptions().slots(3).capacity(64));
    GenerationEngine separate(policy->model(), GenerationEngineOptions().slots(3).capacity(64).merged_projections(false));
    const auto run = [&requests](GenerationEngine& engine) {
      for (const GenerationRequest& r : requests) engine.add(r);
      return engine.run();
    };
    const std::vector<GenerationResult> before = run(merged);
    const std::vector<GenerationResult> want_before = run(separate);
    for (size_t i = 0; i < requests.size(); ++i) check_same(before[i], want_before[i]);
    // An optimizer-like in-place step on the merged projections' weights: the same engine must
    // serve the new weights (a stale merged copy would keep sampling the old model).
    {
      torch::NoGradGuard no_grad;
      for (const auto& p : policy->model()->named_parameters())
        for (const char* name : {"q_proj.", "k_proj.", "v_proj.", "gate_proj.", "up_proj."})
          if (p.key().find(name) != std::string::npos) p.value().mul_(-1.5);
    }
    const std::vector<GenerationResult> after = run(merged);
    const std::vector<GenerationResult> want_after = run(separate);
    bool changed = false;
    for (size_t i = 0; i < requests.size(); ++i) {
      check_same(after[i], want_after[i]);
      changed = changed || after[i].tokens != before[i].tokens;
    }
    CHECK(changed);  // else this case would not tell a stale copy from a fresh one
  }
}

TEST_CASE("generation_engine: projections that get a LoRA adapter leave the merged path", "[model]") {
  auto policy = load_fixture("qwen2");
  const std::vector<GenerationRequest> requests = mixed_requests();
  GenerationEngine engine(policy->model(), GenerationEngineOptions().slots(3).capacity(64));
  const auto run = [&requests](GenerationEngine& e) {
    for (const GenerationRequest& r : requests) e.add(r);
    return e.run();
  };
  run(engine);
  policy->model()->add_lora(LoraOptions().rank(4).target_modules({"k_proj", "up_proj"}));
  {
    // Non-zero adapters: a merged copy that ignored them would sample the base model.
    torch::NoGradGuard no_grad;
    for (const auto& p : policy->model()->named_parameters())
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 0.5);
  }
  const std::vector<GenerationResult> got = run(engine);
  GenerationEngine separate(policy->model(), GenerationEngineOptions().slots(3).capacity(64).merged_projections(false));
  const std::vector<GenerationResult> want = run(separate);
  for (size_t i = 0; i < requests.size(); ++i) check_same(got[i], want[i]);
}

TEST_CASE("generation_engine: stop tokens and max_new_tokens end a request", "[model]") {
  auto policy = load_fixture("qwen3");
  const GenerationRequest greedy = GenerationRequest().prompt({5, 6, 7}).options(SamplingOptions().temp(0).max_new(8));
  const GenerationResult full = run_alone(policy->model(), greedy);
  CHECK(full.tokens.size() == 8);
  CHECK_FALSE(full.stopped);
  // Stopping at the third token's value: the first occurrence ends the request, stop token included.
  const int64_t stop = full.tokens[2];
  const size_t first = size_t(std::find(full.tokens.begin(), full.tokens.end(), stop) - full.tokens.begin());
  GenerationRequest stopping = greedy;
  stopping.sampling.stop({stop});
  const GenerationResult stopped = run_alone(policy->model(), stopping);
  CHECK(stopped.stopped);
  CHECK(stopped.tokens == std::vector<int64_t>(full.tokens.begin(), full.tokens.begin() + int64_t(first) + 1));
}

TEST_CASE("generation_engine: a reused slot leaks nothing from its previous sequence", "[model]") {
  auto policy = load_fixture("qwen3");
  const GenerationRequest first =
      GenerationRequest().prompt({50, 51, 52, 53, 54, 55, 56, 57, 58, 59}).options(SamplingOptions().max_new(30)).stream(8);
  const GenerationRequest second = GenerationRequest().prompt({7, 8}).options(SamplingOptions().max_new(12)).stream(9);
  GenerationEngine engine(policy->model(), GenerationEngineOptions().slots(1).capacity(64));
  engine.add(first);
  engine.run();
  engine.add(second);
  const GenerationResult after = engine.run().front();
  check_same(after, run_alone(policy->model(), second));
  // A released kept sequence leaves nothing behind either.
  engine.add(GenerationRequest(first).kept());
  const std::vector<GenerationResult> kept = engine.run();
  CHECK(engine.kept_sequences() == 1);
  engine.release(kept.front().id);
  CHECK(engine.kept_sequences() == 0);
  engine.add(second);
  check_same(engine.run().front(), after);
}

TEST_CASE("generation_engine: extending a kept sequence prefills only the new tokens and equals a full prefill", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);
    auto policy = load_fixture(family);
    GenerationEngine engine(policy->model(), GenerationEngineOptions().slots(2).capacity(96));
    const GenerationRequest turn1 = GenerationRequest().prompt({5, 6, 7, 8}).options(SamplingOptions().max_new(10)).stream(1).kept();
    const int64_t id1 = engine.add(turn1);
    const GenerationResult r1 = engine.run().front();
    // The next turn: prompt + response + feedback.
    std::vector<int64_t> sequence = turn1.tokens;
    sequence.insert(sequence.end(), r1.tokens.begin(), r1.tokens.end());
    sequence.insert(sequence.end(), {60, 61, 62});
    const GenerationRequest turn2 = GenerationRequest().prompt(sequence).options(SamplingOptions().max_new(10)).stream(2);
    const int64_t prefilled_before = engine.stats().prefilled_tokens;
    engine.add(GenerationRequest(turn2).continues(id1).kept());
    const GenerationResult r2 = engine.run().front();
    // Every token of turn 1 but its last sampled one (whose keys were never computed) is reused.
    CHECK(r2.reused_tokens == int64_t(turn1.tokens.size() + r1.tokens.size()) - 1);
    CHECK(engine.stats().prefilled_tokens - prefilled_before == int64_t(sequence.size()) - r2.reused_tokens);
    check_same(r2, run_alone(policy->model(), turn2));
    // A continuation that rewrites part of the kept sequence (a truncated history) reuses only the
    // common prefix and still equals a full prefill.
    std::vector<int64_t> edited = sequence;
    edited[6] = 70;
    const GenerationRequest turn3 = GenerationRequest().prompt(edited).options(SamplingOptions().max_new(6)).stream(3);
    engine.add(GenerationRequest(turn3).continues(r2.id));
    const GenerationResult r3 = engine.run().front();
    CHECK(r3.reused_tokens == 6);
    check_same(r3, run_alone(policy->model(), turn3));
  }
}

TEST_CASE("generation_engine: shared prompt prefixes are prefilled once and generate what separate prefills do", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);
    auto policy = load_fixture(family);
    // An RL group: four samples of one 24-token prompt, two of a prompt that shares its first 20
    // tokens, and one unrelated request; then a second round whose prompts share the first round's
    // kept sequences.
    std::vector<int64_t> prompt(24), sibling(24);
    for (int64_t i = 0; i < 24; ++i) prompt[size_t(i)] = sibling[size_t(i)] = 30 + i;
    for (int64_t i = 20; i < 24; ++i) sibling[size_t(i)] = 90 + i;
    const SamplingOptions sampled = SamplingOptions().max_new(8).temp(1.0);
    std::vector<GenerationRequest> requests;
    for (int64_t k = 0; k < 4; ++k) requests.push_back(GenerationRequest().prompt(prompt).options(sampled).stream(10 + k));
    for (int64_t k = 0; k < 2; ++k) requests.push_back(GenerationRequest().prompt(sibling).options(sampled).stream(20 + k));
    requests.push_back(GenerationRequest().prompt({5, 6, 7}).options(sampled).stream(30));
    for (const KVCacheDtype storage : {KVCacheDtype::model, KVCacheDtype::fp8_e4m3}) {
      INFO((storage == KVCacheDtype::fp8_e4m3 ? "fp8 cache" : "model dtype cache"));
      std::vector<std::vector<GenerationResult>> runs;
      std::vector<GenerationStats> stats;
      for (const bool share : {true, false}) {
        GenerationEngine engine(policy->model(),
                                GenerationEngineOptions().slots(8).capacity(64).share_prefixes(share).kv_cache_dtype(storage));
        for (const GenerationRequest& r : requests) engine.add(GenerationRequest(r).kept());
        std::vector<GenerationResult> results = engine.run();
        // The next turn of request 0's sample alone, extending nothing: it shares request 0's kept
        // sequence, prompt + response but the last sampled token (never cached).
        std::vector<int64_t> next = prompt;
        next.insert(next.end(), results[0].tokens.begin(), results[0].tokens.end());
        next.push_back(99);
        engine.add(GenerationRequest().prompt(next).options(sampled).stream(40));
        results.push_back(engine.run().front());
        runs.push_back(results);
        stats.push_back(engine.stats());
      }
      REQUIRE(runs[0].size() == runs[1].size());
      for (size_t i = 0; i < runs[0].size(); ++i) {
        INFO("request " << i);
        check_same(runs[0][i], runs[1][i]);
      }
      // Shared: the first sample of each prompt prefills it; the other three copy 23 tokens (all
      // but the last), the sibling's two copy the 20 they share; the next turn copies its prefix.
      CHECK(runs[0][1].reused_tokens == 23);
      CHECK(runs[0][3].reused_tokens == 23);
      CHECK(runs[0][4].reused_tokens == 20);
      CHECK(runs[0][5].reused_tokens == 23);  // the sibling's second sample: from the first one
      CHECK(runs[0][6].reused_tokens == 0);
      CHECK(runs[0][7].reused_tokens == int64_t(prompt.size() + runs[0][0].tokens.size()) - 1);
      CHECK(stats[0].shared_tokens == 3 * 23 + 20 + 23 + runs[0][7].reused_tokens);
      CHECK(stats[1].shared_tokens == 0);
      CHECK(stats[0].prefilled_tokens == stats[1].prefilled_tokens - stats[0].shared_tokens);
    }
  }
}

TEST_CASE("generation_engine: a kept sequence evicted for a new request is prefilled in full when extended", "[model]") {
  auto policy = load_fixture("qwen2");
  GenerationEngine engine(policy->model(), GenerationEngineOptions().slots(1).capacity(64));
  const GenerationRequest first = GenerationRequest().prompt({5, 6, 7, 8}).options(SamplingOptions().max_new(5)).stream(1);
  const int64_t kept_id = engine.add(GenerationRequest(first).kept());
  const GenerationResult kept = engine.run().front();
  engine.add(GenerationRequest().prompt({9, 10}).options(SamplingOptions().max_new(5)).stream(2));
  engine.run();  // the only slot was kept: evicted
  CHECK(engine.stats().evictions == 1);
  CHECK(engine.kept_sequences() == 0);
  std::vector<int64_t> sequence = first.tokens;
  sequence.insert(sequence.end(), kept.tokens.begin(), kept.tokens.end());
  sequence.push_back(40);
  const GenerationRequest next = GenerationRequest().prompt(sequence).options(SamplingOptions().max_new(5)).stream(3);
  engine.add(GenerationRequest(next).continues(kept_id));
  const GenerationResult continued = engine.run().front();
  CHECK(continued.reused_tokens == 0);
  check_same(continued, run_alone(policy->model(), next));
}

TEST_CASE("generation_engine: HFPolicy::generate_turn reuses each episode's sequence and equals generate", "[model]") {
  // `plain` answers with generate() alone: an engine whose two slots a generate() call took would
  // have evicted the kept episodes.
  auto policy = load_fixture("llama"), plain = load_fixture("llama");
  const SamplingOptions o = SamplingOptions().max_new(6).rng_seed(4);
  const std::vector<std::vector<int64_t>> first = {{5, 6, 7}, {9, 10, 11, 12}};
  const auto [p1, m1] = left_pad(first, 0);
  const Rollout t1 = policy->generate_turn(p1, m1, o, {10, 11});
  CHECK(torch::equal(t1.tokens, plain->generate(p1, m1, o).tokens));
  std::vector<std::vector<int64_t>> second;
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<int64_t> row = first[size_t(b)];
    const torch::Tensor generated = t1.tokens[b].narrow(0, t1.prompt_length, t1.num_generated[b].item<int64_t>()).contiguous();
    row.insert(row.end(), generated.data_ptr<int64_t>(), generated.data_ptr<int64_t>() + generated.numel());
    row.insert(row.end(), {30 + b, 31});
    second.push_back(row);
  }
  const auto [p2, m2] = left_pad(second, 0);
  const int64_t reused_before = policy->engine()->stats().reused_tokens;
  const SamplingOptions o2 = SamplingOptions(o).rng_seed(5);
  const Rollout t2 = policy->generate_turn(p2, m2, o2, {10, 11});
  CHECK(policy->engine()->stats().reused_tokens - reused_before ==
        int64_t(second[0].size() + second[1].size()) - 2 * 3);  // all but the 2 feedback tokens and the last response token
  policy->end_episodes();
  CHECK(policy->engine()->kept_sequences() == 0);
  const Rollout fresh = plain->generate(p2, m2, o2);
  CHECK(torch::equal(t2.tokens, fresh.tokens));
  CHECK((t2.logp - fresh.logp).abs().max().item<double>() < 1e-4);
  CHECK_THROWS_WITH(policy->generate_turn(p2, m2, o2, {1}), Catch::Contains("episodes"));
}

TEST_CASE("generation_engine: bad options and requests are errors naming the field", "[model]") {
  auto policy = load_fixture("qwen3");
  CHECK_THROWS_WITH(GenerationEngine(policy->model(), GenerationEngineOptions().slots(0)), Catch::Contains("engine.slots"));
  CHECK_THROWS_WITH(GenerationEngine(policy->model(), GenerationEngineOptions().capacity(1)), Catch::Contains("engine.capacity"));
  CHECK_THROWS_WITH(GenerationEngine(policy->model(), GenerationEngineOptions().prefill_tokens(0)),
                    Catch::Contains("engine.prefill_tokens"));
  // A KV cache no machine holds (2^40 slot-tokens, past a 47-bit address space): a sized error.
  CHECK_THROWS_WITH(GenerationEngine(policy->model(), GenerationEngineOptions().slots(1 << 20).capacity(1 << 20)),
                    Catch::Contains("KV cache of 1048576 slots x 1048576 tokens") &&
                        Catch::Contains("lower engine.slots or engine.capacity"));
  GenerationEngine engine(policy->model(), GenerationEngineOptions().slots(1).capacity(16));
  CHECK_THROWS_WITH(engine.add(GenerationRequest()), Catch::Contains("tokens: empty"));
  CHECK_THROWS_WITH(engine.add(GenerationRequest().prompt({1, 2}).options(SamplingOptions().max_new(20))),
                    Catch::Contains("engine.capacity is 16"));
  CHECK_THROWS_WITH(engine.add(GenerationRequest().prompt({1, 1 << 30})), Catch::Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(engine.add(GenerationRequest().prompt({1}).options(SamplingOptions().max_new(2)).continues(5)),
                    Catch::Contains("extends"));
  CHECK_THROWS_WITH(engine.add(GenerationRequest().prompt({1}).options(SamplingOptions().max_new(2).topp(0))),
                    Catch::Contains("top_p"));
}
