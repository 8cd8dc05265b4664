#pragma once
// A plain binary encoding shared by the engine's messages (the CPU evaluator's worker protocol, the
// data-parallel rollout gather): little-endian PODs, length-prefixed strings and vectors, and types
// with write(ByteWriter&) / read(ByteReader&) members. Reading past the end throws turnrl::Error.
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "turnrl/core/error.h"

namespace turnrl {

class ByteWriter {
 public:
  template <typename T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod(uint64_t(s.size()));
    buf_ += s;
  }
  template <typename T>
  void vec(const std::vector<T>& v) {
    pod(uint64_t(v.size()));
    if constexpr (std::is_trivially_copyable_v<T>) {
      buf_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
    } else {
      for (const auto& x : v) put(x);
    }
  }
  template <typename T>
  void put(const T& v) {
    if constexpr (std::is_trivially_copyable_v<T>) pod(v);
    else if constexpr (std::is_same_v<T, std::string>) str(v);
    else v.write(*this);
  }
  template <typename T>
  void put(const std::vector<T>& v) { vec(v); }
  const std::string& data() const { return buf_; }
  std::string take() { return std::move(buf_); }  // the bytes without a copy (a large reply's peak memory)

 private:
  std::string buf_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& s) : p_(s.data()), end_(s.data() + s.size()) {}
  template <typename T>
  T pod() {
    T v;
    need(sizeof v);
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = pod<uint64_t>();
    need(n);
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  template <typename T>
  void get(T& v) {
    if constexpr (std::is_trivially_copyable_v<T>) v = pod<T>();
    else if constexpr (std::is_same_v<T, std::string>) v = str();
    else v.read(*this);
  }
  template <typename T>
  void get(std::vector<T>& v) {
    const auto n = pod<uint64_t>();
    // Every element takes at least one byte of the message: a forged count cannot make the reader
    // allocate more than the message could hold (or overflow n * sizeof(T)).
    if (n > uint64_t(end_ - p_)) throw Error("byte stream: vector longer than the message");
    if constexpr (std::is_trivially_copyable_v<T>) {
      need(n * sizeof(T));
      v.resize(n);
      std::memcpy(v.data(), p_, n * sizeof(T));
      p_ += n * sizeof(T);
    } else {
      v.resize(n);
      for (auto& x : v) get(x);
    }
  }

  bool at_end() const { return p_ == end_; }

 private:
  void need(uint64_t n) {
    if (uint64_t(end_ - p_) < n) throw Error("byte stream: message truncated");
  }
  const char* p_;
  const char* end_;
};

}  // namespace turnrl
