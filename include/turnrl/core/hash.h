#pragma once
// 64-bit FNV-1a: a fast, stable hash of bytes for cache keys, object checks and seeded splits.
// It detects change; it is not a signature.
#include <cstdint>
#include <string>
#include <string_view>

namespace turnrl {

// The standard 64-bit offset basis. (The four copies this replaced used 1469598103934665603, a digit
// short of it: not FNV-1a, though stable. Cache keys and the hash split of tasks changed with it.)
constexpr uint64_t kFnv1aOffset = 14695981039346656037ull;

// FNV-1a of `bytes`, continuing from `state` (chain calls to hash several pieces in order).
inline uint64_t fnv1a64(std::string_view bytes, uint64_t state = kFnv1aOffset) {
  for (unsigned char c : bytes) state = (state ^ c) * 1099511628211ull;
  return state;
}

// 16 lower-case hex digits.
std::string hex64(uint64_t value);

}  // namespace turnrl
