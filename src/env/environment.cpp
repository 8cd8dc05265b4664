#include "turnrl/env/environment.h"

#include <typeinfo>

#include "turnrl/core/error.h"

namespace turnrl {

std::vector<StepResult> Environment::step_many(const std::vector<Environment*>& episodes,
                                               const std::vector<Action>& actions) {
  std::vector<StepResult> out;
  out.reserve(episodes.size());
  for (size_t i = 0; i < episodes.size(); ++i) out.push_back(episodes[i]->step(actions[i]));
  return out;
}

std::vector<StepResult> step_batch(const std::vector<Environment*>& episodes, const std::vector<Action>& actions) {
  if (episodes.size() != actions.size())
    fail("step_batch: {} episodes but {} actions; one action per episode", episodes.size(), actions.size());
  if (episodes.empty()) return {};
  for (size_t i = 0; i < episodes.size(); ++i) {
    if (episodes[i] == nullptr) fail("step_batch: episode {} is null", i);
    if (typeid(*episodes[i]) != typeid(*episodes[0]))
      fail("step_batch: episode {} is a {} but episode 0 is a {}; batch episodes of one environment type",
           i, typeid(*episodes[i]).name(), typeid(*episodes[0]).name());
  }
  return episodes[0]->step_many(episodes, actions);
}

}  // namespace turnrl
