#pragma once
// Episodes as JSON lines, one line an episode: {"step", "task", "episode", "turns": [{"observation",
// "action", "reward", and the payload's own fields (StepPayload::json_fields)}, ...]}. The trainer
// writes a few of each step's to samples.jsonl; `turnrl eval --episodes FILE` writes all of an
// evaluation's, so that a table's failures can be read turn by turn.
#include <cstdint>
#include <string>

#include "turnrl/rl/rollout.h"

namespace turnrl {

// The first max_episodes episodes of r (rows in (trajectory, turn) order), each line tagged `step`.
std::string episode_lines(const RolloutBatch& r, int64_t step, int64_t max_episodes);

}  // namespace turnrl
