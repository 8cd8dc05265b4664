#pragma once
// splitmix64: the engine's small deterministic generator (task orders, stage seeds, task splits,
// evaluator inputs). Not for anything that must be unpredictable.
#include <cstdint>

namespace turnrl {

// Advances `state` and returns the next 64-bit output (Steele, Lea and Flood 2014).
uint64_t splitmix64(uint64_t& state);

}  // namespace turnrl
