#include "turnrl/rl/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"

namespace turnrl {
namespace {

// Protobuf wire format: a field key is (field number << 3) | wire type.
enum WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}
void put_key(std::string& out, int field, WireType type) { put_varint(out, uint64_t(field) << 3 | type); }
template <typename T>
void put_little_endian(std::string& out, T v) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // the host is little-endian (x86-64, aarch64), as the format is
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// tensorflow.Event fields and Summary / Summary.Value fields used here.
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr int kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;

std::string event_header(double wall_time) {
  std::string e;
  put_key(e, kEventWallTime, kFixed64);
  put_little_endian(e, wall_time);
  return e;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A cursor over one serialized message; every read checks the bounds.
class WireReader {
 public:
  WireReader(const std::string& s, const std::string& where) : s_(s), where_(where) {}
  bool done() const { return pos_ >= s_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const uint8_t b = uint8_t(s_[pos_++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("{}: varint longer than 10 bytes", where_);
  }
  template <typename T>
  T little_endian() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string bytes() {
    const uint64_t n = varint();
    need(n);
    std::string out = s_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  void skip(WireType type) {
    if (type == kVarint) varint();
    else if (type == kFixed64) little_endian<uint64_t>();
    else if (type == kFixed32) little_endian<uint32_t>();
    else if (type == kLengthDelimited) bytes();
    else fail("{}: unsupported wire type {}", where_, int(type));
  }

 private:
  void need(uint64_t n) const {
    if (n > s_.size() - pos_) fail("{}: message truncated", where_);
  }
  const std::string& s_;
  std::string where_;
  size_t pos_ = 0;
};

void read_summary(const std::string& summary, TensorBoardEvent& event, const std::string& where) {
  WireReader r(summary, where);
  while (!r.done()) {
    const uint64_t key = r.varint();
    if (key >> 3 != kSummaryValue || (key & 7) != kLengthDelimited) {
      r.skip(WireType(key & 7));
      continue;
    }
    const std::string value = r.bytes();
    WireReader v(value, where);
    std::pair<std::string, float> scalar{"", NAN};
    while (!v.done()) {
      const uint64_t k = v.varint();
      if (k >> 3 == kValueTag && (k & 7) == kLengthDelimited) scalar.first = v.bytes();
      else if (k >> 3 == kValueSimpleValue && (k & 7) == kFixed32) scalar.second = v.little_endian<float>();
      else v.skip(WireType(k & 7));
    }
    event.scalars.push_back(scalar);
  }
}

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t size) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const uint8_t* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string tfrecord(const std::string& data) {
  std::string out;
  put_little_endian(out, uint64_t(data.size()));
  put_little_endian(out, masked_crc32c(reinterpret_cast<const uint8_t*>(out.data()), 8));
  out += data;
  put_little_endian(out, masked_crc32c(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e = event_header(wall_time);
  put_bytes(e, kEventFileVersion, "brain.Event:2");
  return e;
}

std::string scalar_event(double wall_time, int64_t step, const Metrics& metrics) {
  std::string summary;
  for (const auto& [tag, value] : metrics) {
    if (tag == "step") continue;
    std::string v;
    put_bytes(v, kValueTag, tag);
    put_key(v, kValueSimpleValue, kFixed32);
    put_little_endian(v, float(value));
    put_bytes(summary, kSummaryValue, v);
  }
  std::string e = event_header(wall_time);
  put_key(e, kEventStep, kVarint);
  put_varint(e, uint64_t(step));
  put_bytes(e, kEventSummary, summary);
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& run_dir) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) std::strcpy(host, "localhost");
  const double now = unix_seconds();
  path_ = (std::filesystem::path(run_dir) / fmt::format("events.out.tfevents.{}.{}", int64_t(now), host)).string();
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) fail("cannot open the TensorBoard event file '{}' for writing", path_);
  out_ << tfrecord(file_version_event(now));
  out_.flush();
}

void TensorBoardWriter::write_scalars(int64_t step, const Metrics& metrics) {
  out_ << tfrecord(scalar_event(unix_seconds(), step, metrics));
  out_.flush();
  if (!out_) fail("cannot write the TensorBoard event file '{}'", path_);
}

std::vector<TensorBoardEvent> read_tensorboard_events(const std::string& path) {
  const std::string file = read_file(path, "the TensorBoard event file");
  std::vector<TensorBoardEvent> events;
  for (size_t at = 0; at < file.size();) {
    const std::string where = fmt::format("{}: record {} (byte {})", path, events.size(), at);
    if (file.size() - at < 12) fail("{}: truncated header", where);
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, file.data() + at, 8);
    std::memcpy(&length_crc, file.data() + at + 8, 4);
    if (length_crc != masked_crc32c(reinterpret_cast<const uint8_t*>(file.data() + at), 8))
      fail("{}: length CRC mismatch", where);
    if (length > file.size() - at - 12 || file.size() - at - 12 - length < 4) fail("{}: truncated data", where);
    const std::string data = file.substr(at + 12, length);
    std::memcpy(&data_crc, file.data() + at + 12 + length, 4);
    if (data_crc != masked_crc32c(reinterpret_cast<const uint8_t*>(data.data()), data.size()))
      fail("{}: data CRC mismatch", where);
    TensorBoardEvent event;
    WireReader r(data, where);
    while (!r.done()) {
      const uint64_t key = r.varint();
      const int field = int(key >> 3);
      const auto type = WireType(key & 7);
      if (field == kEventWallTime && type == kFixed64) event.wall_time = r.little_endian<double>();
      else if (field == kEventStep && type == kVarint) event.step = int64_t(r.varint());
      else if (field == kEventFileVersion && type == kLengthDelimited) event.file_version = r.bytes();
      else if (field == kEventSummary && type == kLengthDelimited) read_summary(r.bytes(), event, where);
      else r.skip(type);
    }
    events.push_back(std::move(event));
    at += 12 + length + 4;
  }
  return events;
}

}  // namespace turnrl
