// FNV-1a 64 against the published test vectors of its authors' reference implementation.
#include <catch2/catch.hpp>

#include "turnrl/core/hash.h"

using namespace turnrl;

TEST_CASE("fnv1a64 matches the reference vectors and chains over pieces", "[hash]") {
  CHECK(fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(fnv1a64("foobar") == 0x85944171f73967e8ull);
  CHECK(fnv1a64("bar", fnv1a64("foo")) == fnv1a64("foobar"));
  CHECK(fnv1a64(std::string_view("a\0b", 3)) != fnv1a64("ab"));  // bytes, not C strings
  CHECK(hex64(0xcbf29ce484222325ull) == "cbf29ce484222325");
  CHECK(hex64(1) == "0000000000000001");
}
