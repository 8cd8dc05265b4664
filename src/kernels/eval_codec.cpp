#include "turnrl/kernels/eval_codec.h"

#include <cstdint>
#include <cstring>

#include "turnrl/core/error.h"

namespace turnrl {
namespace {

constexpr char kRequestMagic[4] = {'T', 'R', 'Q', '1'};
constexpr char kResultMagic[4] = {'T', 'R', 'S', '1'};
// Bounds a hostile length field before anything is allocated; real messages are far smaller.
constexpr uint32_t kMaxString = 64u << 20;

class Out {
 public:
  explicit Out(const char* magic) { s_.append(magic, 4); }
  void u8(uint8_t v) { s_.push_back(char(v)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) s_.push_back(char((v >> (8 * i)) & 0xff));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) s_.push_back(char((v >> (8 * i)) & 0xff));
  }
  void i32(int32_t v) { u32(uint32_t(v)); }
  void i64(int64_t v) { u64(uint64_t(v)); }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    u64(bits);
  }
  void str(const std::string& v) {
    u32(uint32_t(v.size()));
    s_ += v;
  }
  void timing(const TimingStats& t) { f64(t.median_us), f64(t.min_us), f64(t.spread_us), i32(t.trials); }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

// Every read names the field, so the error says where a message broke.
class In {
 public:
  In(const std::string& s, const char* magic, const char* what) : s_(s), what_(what) {
    if (s.size() < 4 || std::memcmp(s.data(), magic, 4) != 0)
      fail("eval codec: malformed {}: expected magic '{}' ({} bytes received)", what_, std::string(magic, 4), s.size());
    pos_ = 4;
  }
  uint8_t u8(const char* field) {
    need(1, field);
    return uint8_t(s_[pos_++]);
  }
  uint32_t u32(const char* field) {
    need(4, field);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(s_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return v;
  }
  uint64_t u64(const char* field) {
    need(8, field);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(s_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  int32_t i32(const char* field) { return int32_t(u32(field)); }
  int64_t i64(const char* field) { return int64_t(u64(field)); }
  double f64(const char* field) {
    const uint64_t bits = u64(field);
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  bool boolean(const char* field) {
    const uint8_t v = u8(field);
    if (v > 1) bad(field, fmt::format("value {} is not 0 or 1", v));
    return v == 1;
  }
  // An enum stored as one byte, valid in [0, last].
  template <typename E>
  E enumeration(const char* field, E last) {
    const uint8_t v = u8(field);
    if (v > uint8_t(last)) bad(field, fmt::format("value {} is out of range [0, {}]", v, int(last)));
    return E(v);
  }
  std::string str(const char* field) {
    const uint32_t n = u32(field);
    if (n > kMaxString) bad(field, fmt::format("length {} exceeds the limit {}", n, kMaxString));
    need(n, field);
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  // A list count, checked against the bytes left (each element needs at least min_bytes).
  uint32_t count(const char* field, size_t min_bytes) {
    const uint32_t n = u32(field);
    if (uint64_t(n) * min_bytes > s_.size() - pos_)
      bad(field, fmt::format("{} elements cannot fit in the {} bytes left", n, s_.size() - pos_));
    return n;
  }
  TimingStats timing(const char* field) {
    TimingStats t;
    t.median_us = f64(field), t.min_us = f64(field), t.spread_us = f64(field), t.trials = i32(field);
    return t;
  }
  void finish() const {
    if (pos_ != s_.size()) fail("eval codec: malformed {}: {} unexpected bytes after the last field", what_, s_.size() - pos_);
  }

 private:
  void need(size_t n, const char* field) const {
    if (s_.size() - pos_ < n) bad(field, fmt::format("truncated: needs {} bytes, {} left", n, s_.size() - pos_));
  }
  [[noreturn]] void bad(const char* field, const std::string& why) const {
    fail("eval codec: malformed {}: field '{}' at byte {}: {}", what_, field, pos_, why);
  }
  const std::string& s_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace

std::string encode_request(const EvalRequest& r) {
  Out o(kRequestMagic);
  o.str(r.task), o.str(r.candidate), o.i32(r.correctness_trials), o.i32(r.timing_trials), o.u64(r.seed);
  return o.take();
}

EvalRequest decode_request(const std::string& bytes) {
  In in(bytes, kRequestMagic, "request");
  EvalRequest r;
  r.task = in.str("task");
  r.candidate = in.str("candidate");
  r.correctness_trials = in.i32("correctness_trials");
  r.timing_trials = in.i32("timing_trials");
  r.seed = in.u64("seed");
  in.finish();
  return r;
}

std::string encode_result(const EvalResult& r) {
  Out o(kResultMagic);
  o.u8(uint8_t(r.stage)), o.u8(uint8_t(r.error)), o.str(r.message), o.u8(r.correct);
  o.f64(r.max_abs_error), o.f64(r.max_rel_error), o.i64(r.failing_index);
  o.timing(r.reference_time), o.timing(r.candidate_time), o.f64(r.speedup);
  o.f64(r.coverage), o.f64(r.reference_coverage), o.f64(r.kernel_count_coverage);
  o.u32(uint32_t(r.profile.size()));
  for (const auto& k : r.profile) o.str(k.name), o.f64(k.device_us), o.i32(k.calls), o.u8(k.candidate);
  o.u32(r.hacking_flags), o.str(r.hacking_reason), o.f64(r.wall_seconds);
  return o.take();
}

EvalResult decode_result(const std::string& bytes) {
  In in(bytes, kResultMagic, "result");
  EvalResult r;
  r.stage = in.enumeration("stage", EvalStage::profiled);
  r.error = in.enumeration("error", EvalError::internal);
  r.message = in.str("message");
  r.correct = in.boolean("correct");
  r.max_abs_error = in.f64("max_abs_error");
  r.max_rel_error = in.f64("max_rel_error");
  r.failing_index = in.i64("failing_index");
  r.reference_time = in.timing("reference_time");
  r.candidate_time = in.timing("candidate_time");
  r.speedup = in.f64("speedup");
  r.coverage = in.f64("coverage");
  r.reference_coverage = in.f64("reference_coverage");
  r.kernel_count_coverage = in.f64("kernel_count_coverage");
  r.profile.resize(in.count("profile", 4 + 8 + 4 + 1));
  for (auto& k : r.profile) {
    k.name = in.str("profile.name");
    k.device_us = in.f64("profile.device_us");
    k.calls = in.i32("profile.calls");
    k.candidate = in.boolean("profile.candidate");
  }
  r.hacking_flags = in.u32("hacking_flags");
  r.hacking_reason = in.str("hacking_reason");
  r.wall_seconds = in.f64("wall_seconds");
  in.finish();
  return r;
}

}  // namespace turnrl
