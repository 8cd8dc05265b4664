// TurnBatch validation: every malformed batch gets an error naming the field and the row.
#include <catch2/catch.hpp>

#include "support/batches.h"
#include "turnrl/core/error.h"
#include "turnrl/core/turn_batch.h"

using namespace turnrl;
using turnrl::reference::Turn;
using turnrl::testing::to_batch;

namespace {
TurnBatch from_ids(std::vector<int64_t> g, std::vector<int64_t> j, std::vector<int64_t> t) {
  TurnBatch b;
  b.group = at::tensor(g, at::kLong);
  b.traj = at::tensor(j, at::kLong);
  b.turn = at::tensor(t, at::kLong);
  b.reward = at::zeros({int64_t(g.size())});
  return b;
}
}  // namespace

TEST_CASE("finalize computes the host sizes", "[turn_batch]") {
  TurnBatch b = from_ids({0, 0, 2}, {0, 0, 5}, {0, 1, 0});
  finalize(b);
  REQUIRE(b.num_groups == 3);
  REQUIRE(b.num_trajectories == 6);
  REQUIRE(b.max_turns == 2);
  REQUIRE(b.size() == 3);
  REQUIRE(to_dense_turns(b, at::tensor({1.0, 2.0, 3.0})).sizes() == at::IntArrayRef({6, 2}));
  REQUIRE(from_dense_turns(b, to_dense_turns(b, at::tensor({1.0, 2.0, 3.0}))).equal(at::tensor({1.0, 2.0, 3.0})));
}

TEST_CASE("malformed batches are rejected naming the field and row", "[turn_batch][edge]") {
  SECTION("negative id") {
    TurnBatch b = from_ids({0, -1}, {0, 1}, {0, 0});
    REQUIRE_THROWS_WITH(finalize(b), Catch::Contains("TurnBatch.group: row 1 has id -1"));
  }
  SECTION("turns with a gap") {
    TurnBatch b = from_ids({0, 0}, {0, 0}, {0, 2});
    REQUIRE_THROWS_WITH(finalize(b), Catch::Contains("trajectory 0 (row 1) has turn 2 but no turn 1"));
  }
  SECTION("a repeated turn") {
    TurnBatch b = from_ids({0, 0, 0}, {0, 0, 0}, {0, 1, 1});
    REQUIRE_THROWS_WITH(finalize(b), Catch::Contains("repeats turn 1 of trajectory 0"));
  }
  SECTION("a trajectory in two groups") {
    TurnBatch b = from_ids({0, 1}, {3, 3}, {0, 1});
    REQUIRE_THROWS_WITH(finalize(b), Catch::Contains("trajectory 3 appears in groups"));
  }
  SECTION("mismatched leading dimension") {
    TurnBatch b = from_ids({0, 0}, {0, 1}, {0, 0});
    b.reward = at::zeros({3});
    REQUIRE_THROWS_WITH(finalize(b), Catch::Contains("TurnBatch.reward: shape 3"));
  }
  SECTION("wrong dtype") {
    TurnBatch b = from_ids({0, 0}, {0, 1}, {0, 0});
    b.turn = b.turn.to(at::kInt);
    REQUIRE_THROWS_WITH(finalize(b), Catch::Contains("TurnBatch.turn: dtype") && Catch::Contains("int64"));
  }
  SECTION("token tensors of another shape") {
    TurnBatch b = from_ids({0, 0}, {0, 1}, {0, 0});
    b.response_mask = at::ones({2, 4}, at::kBool);
    b.rollout_logp = at::zeros({2, 5});
    REQUIRE_THROWS_WITH(finalize(b), Catch::Contains("TurnBatch.rollout_logp: shape 2x5 differs"));
  }
  SECTION("host sizes that do not bound the ids") {
    TurnBatch b = from_ids({0, 3}, {0, 1}, {0, 0});
    b.num_groups = 2, b.num_trajectories = 2, b.max_turns = 1;
    REQUIRE_THROWS_WITH(validate(b), Catch::Contains("TurnBatch.group: row 1 has id 3; allowed: 0..1"));
  }
}

TEST_CASE("non-finite rewards: rejected, unless masked and allowed", "[turn_batch][edge]") {
  TurnBatch b = from_ids({0, 0}, {0, 1}, {0, 0});
  b.reward = at::tensor({1.0f, std::numeric_limits<float>::infinity()});
  REQUIRE_THROWS_WITH(finalize(b), Catch::Contains("TurnBatch.reward: row 1 is inf"));
  b.turn_mask = at::tensor(std::vector<int64_t>{1, 0}).to(at::kBool);
  REQUIRE_THROWS(finalize(b));
  REQUIRE_NOTHROW(finalize(b, ValidateOptions().allow_nonfinite_masked(true)));
}

TEST_CASE("an empty batch is valid", "[turn_batch][edge]") {
  TurnBatch b = from_ids({}, {}, {});
  REQUIRE_NOTHROW(finalize(b));
  REQUIRE(b.size() == 0);
}
