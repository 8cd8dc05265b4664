// The fp8 e4m3 codes of the engine's KV cache (src/model/fp8_e4m3.h) against hand-computed values
// and a nearest-value search written with scalars, and the engine over an fp8 cache
// (GenerationEngineOptions::kv_cache_dtype) against itself without a cache.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "model/fp8_e4m3.h"
#include "model/generation_requests.h"
#include "model/hf_fixtures.h"
#include "turnrl/model/generation_engine.h"

using namespace turnrl;
using namespace turnrl::test;

namespace {

// The finite non-negative e4m3 values from their definition, in code order 0x00 .. 0x7E.
std::vector<double> positive_values() {
  std::vector<double> v;
  for (int exponent = 0; exponent < 16; ++exponent)
    for (int mantissa = 0; mantissa < 8; ++mantissa) {
      if (exponent == 15 && mantissa == 7) continue;  // NaN
      v.push_back(exponent == 0 ? mantissa / 8.0 * std::pow(2.0, -6) : (1 + mantissa / 8.0) * std::pow(2.0, exponent - 7));
    }
  return v;
}

// The code of x by searching all values for the nearest (ties: the even code), saturated at 448.
int scalar_code(float x) {
  if (std::isnan(x)) return 0x7F;
  static const std::vector<double> values = positive_values();
  const double a = std::min(std::fabs(double(x)), 448.0);
  size_t best = 0;
  for (size_t c = 1; c < values.size(); ++c) {
    const double d = std::fabs(values[c] - a), b = std::fabs(values[best] - a);
    if (d < b || (d == b && c % 2 == 0)) best = c;
  }
  return int(best) | (std::signbit(x) ? 0x80 : 0);
}

}  // namespace

TEST_CASE("fp8_e4m3: codes decode to the values of the format", "[model]") {
  namespace d = turnrl::detail;
  CHECK(d::e4m3_value(0x00) == 0.0f);
  CHECK(d::e4m3_value(0x01) == std::ldexp(1.0f, -9));  // the least subnormal
  CHECK(d::e4m3_value(0x07) == 7 * std::ldexp(1.0f, -9));
  CHECK(d::e4m3_value(0x08) == std::ldexp(1.0f, -6));  // the least normal
  CHECK(d::e4m3_value(0x38) == 1.0f);
  CHECK(d::e4m3_value(0x39) == 1.125f);
  CHECK(d::e4m3_value(0x7E) == 448.0f);
  CHECK(d::e4m3_value(0xFE) == -448.0f);
  CHECK(std::signbit(d::e4m3_value(0x80)));
  CHECK(std::isnan(d::e4m3_value(0x7F)));
  CHECK(std::isnan(d::e4m3_value(0xFF)));
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[size_t(c)] = uint8_t(c);
  const torch::Tensor all = torch::from_blob(codes.data(), {16, 16}, torch::kByte).clone();
  for (const torch::Dtype dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    const torch::Tensor values = d::from_e4m3(all, dtype);
    REQUIRE(values.sizes() == all.sizes());
    REQUIRE(values.scalar_type() == dtype);
    const torch::Tensor f = values.to(torch::kFloat).flatten();
    for (int c = 0; c < 256; ++c) {
      const float want = d::e4m3_value(uint8_t(c)), got = f[c].item<float>();
      if (std::isnan(want)) CHECK(std::isnan(got));
      else CHECK(got == want);  // every e4m3 value is exact in float16 and bfloat16
    }
  }
  CHECK_THROWS_WITH(d::from_e4m3(torch::zeros({2}), torch::kFloat), Catch::Contains("uint8"));
}

TEST_CASE("fp8_e4m3: values round to the nearest code, ties to even, saturated, as a scalar search", "[model]") {
  namespace d = turnrl::detail;
  const std::vector<double> values = positive_values();
  std::vector<float> inputs;
  for (size_t c = 0; c < values.size(); ++c) {
    const float v = float(values[c]);
    inputs.insert(inputs.end(), {v, -v, std::nextafter(v, 1e9f), std::nextafter(v, -1e9f)});
    if (c + 1 < values.size()) {
      const float mid = float((values[c] + values[c + 1]) / 2);  // exact: ties
      inputs.insert(inputs.end(), {mid, -mid, std::nextafter(mid, 1e9f), std::nextafter(mid, -1e9f)});
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  inputs.insert(inputs.end(), {0.0f, -0.0f, 1e-10f, -1e-10f, std::ldexp(1.0f, -10), std::ldexp(3.0f, -11), 449.0f,
                               463.9f, 464.0f, 465.0f, 1e6f, -1e6f, inf, -inf, std::numeric_limits<float>::quiet_NaN()});
  torch::manual_seed(3);
  for (const double scale : {0.01, 1.0, 30.0}) {
    const torch::Tensor r = torch::randn({500}) * scale;
    inputs.insert(inputs.end(), r.data_ptr<float>(), r.data_ptr<float>() + 500);
  }
  const torch::Tensor x = torch::tensor(inputs);
  const torch::Tensor codes = d::to_e4m3(x.view({-1, 1}));
  REQUIRE(codes.scalar_type() == torch::kByte);
  REQUIRE(codes.sizes() == torch::IntArrayRef({int64_t(inputs.size()), 1}));
  const uint8_t* got = codes.data_ptr<uint8_t>();
  int wrong = 0;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (int(got[i]) != scalar_code(inputs[i]) && wrong++ < 10)
      FAIL_CHECK("x = " << inputs[i] << ": code " << int(got[i]) << ", the scalar search gives " << scalar_code(inputs[i]));
  CHECK(wrong == 0);
  // A few by hand: 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39): the even code 0x38;
  // 1.1875 between 0x39 and 0x3A: 0x3A. 500 saturates to 448, -inf to -448.
  const torch::Tensor hand = d::to_e4m3(torch::tensor({1.0625f, 1.1875f, 500.0f, -inf}));
  CHECK(std::vector<int>(hand.data_ptr<uint8_t>(), hand.data_ptr<uint8_t>() + 4) == std::vector<int>{0x38, 0x3A, 0x7E, 0xFE});
  // bfloat16 input: its values, rounded once to e4m3.
  const torch::Tensor b = (torch::randn({300}) * 5).to(torch::kBFloat16);
  CHECK(torch::equal(d::to_e4m3(b), d::to_e4m3(b.to(torch::kFloat))));
  CHECK_THROWS_WITH(d::to_e4m3(torch::zeros({2}, torch::kLong)), Catch::Contains("floating-point"));
}

namespace {

GenerationEngineOptions fp8_options() {
  return GenerationEngineOptions().slots(2).capacity(64).kv_cache_dtype(KVCacheDtype::fp8_e4m3);
}

// Greedy tokens by a full prefill of the growing sequence each step, in an fp8 engine of its own:
// every step computes every key and value afresh (nothing carried between steps), each stored and
// read back as e4m3 codes, as the cached engine's keys are.
std::vector<int64_t> greedy_by_full_prefills(HFDecoder model, std::vector<int64_t> sequence, int64_t steps,
                                             std::vector<float>& logp) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < steps; ++i) {
    GenerationEngine engine(model, fp8_options());
    engine.add(GenerationRequest().prompt(sequence).options(SamplingOptions().max_new(1).temp(0)));
    const GenerationResult r = engine.run().front();
    out.push_back(r.tokens.front());
    logp.push_back(r.logp.front());
    sequence.push_back(r.tokens.front());
  }
  return out;
}

}  // namespace

TEST_CASE("generation_engine: over an fp8 e4m3 cache, decoding equals a full prefill of each step", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);
    auto policy = load_fixture(family);
    const std::vector<int64_t> prompt = {5, 6, 7, 8, 9, 10, 11};
    GenerationEngine engine(policy->model(), fp8_options());
    engine.add(GenerationRequest().prompt(prompt).options(SamplingOptions().max_new(12).temp(0)));
    const GenerationResult cached = engine.run().front();
    std::vector<float> logp;
    const std::vector<int64_t> want = greedy_by_full_prefills(policy->model(), prompt, 12, logp);
    CHECK(cached.tokens == want);
    if (cached.tokens == want) CHECK(max_gap(cached.logp, logp) < 1e-4);
    // The same requests in the model's dtype: the codes round each key and value once more, a small
    // change to each token's log-prob (the mismatch an fp8 rollout brings), not a different model.
    GenerationEngine exact(policy->model(), GenerationEngineOptions().slots(2).capacity(64));
    exact.add(GenerationRequest().prompt(prompt).options(SamplingOptions().max_new(1).temp(0)));
    const GenerationResult first = exact.run().front();
    INFO("first token's log-prob: fp8 cache " << logp.front() << ", model dtype " << first.logp.front());
    CHECK(std::fabs(logp.front() - first.logp.front()) < 0.25);
  }
}

TEST_CASE("generation_engine: over an fp8 e4m3 cache, continuous batching, reuse and overlap equal one at a time", "[model]") {
  for (const std::string& family : {"qwen3", "llama"}) {
    INFO(family);
    auto policy = load_fixture(family);
    const std::vector<GenerationRequest> requests = mixed_requests();
    GenerationEngine engine(policy->model(), fp8_options().prefill_tokens(6));
    for (const GenerationRequest& r : requests) engine.add(r);
    const std::vector<GenerationResult> together = engine.run();
    REQUIRE(together.size() == requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      INFO("request " << i);
      GenerationEngine alone(policy->model(), fp8_options().slots(1));
      alone.add(requests[i]);
      check_same(together[i], alone.run().front());
    }
    // A kept sequence extended by the next turn prefills only the new tokens, and equals a full prefill.
    GenerationEngine turns(policy->model(), fp8_options());
    const GenerationRequest turn1 = GenerationRequest().prompt({5, 6, 7, 8}).options(SamplingOptions().max_new(8)).stream(1);
    const int64_t id1 = turns.add(GenerationRequest(turn1).kept());
    const GenerationResult r1 = turns.run().front();
    std::vector<int64_t> sequence = turn1.tokens;
    sequence.insert(sequence.end(), r1.tokens.begin(), r1.tokens.end());
    sequence.insert(sequence.end(), {60, 61});
    const GenerationRequest turn2 = GenerationRequest().prompt(sequence).options(SamplingOptions().max_new(8)).stream(2);
    turns.add(GenerationRequest(turn2).continues(id1));
    const GenerationResult r2 = turns.run().front();
    CHECK(r2.reused_tokens == int64_t(sequence.size()) - 3);
    GenerationEngine full(policy->model(), fp8_options());
    full.add(turn2);
    check_same(r2, full.run().front());
  }
}

TEST_CASE("generation_engine: an fp8 cache is refused with FlashAttention's decode attention", "[model]") {
  auto policy = load_fixture("qwen3");
  CHECK_THROWS_WITH(GenerationEngine(policy->model(), fp8_options().decode_attention(DecodeAttention::flash)),
                    Catch::Contains("engine.kv_cache_dtype") && Catch::Contains("split_kv"));
}
