#include "turnrl/rl/environment.h"

#include "turnrl/core/error.h"

namespace turnrl {

EnvironmentPool::EnvironmentPool(std::vector<std::unique_ptr<Environment>> environments)
    : environments_(std::move(environments)) {
  for (size_t i = 0; i < environments_.size(); ++i)
    if (!environments_[i]) fail("EnvironmentPool: environment {} is null", i);
}

Environment& EnvironmentPool::at(size_t episode) {
  if (episode >= environments_.size())
    fail("EnvironmentPool: episode {} is out of range; the pool holds {}", episode, environments_.size());
  return *environments_[episode];
}

void EnvironmentPool::check_step(const std::vector<size_t>& episodes, const std::vector<Action>& actions) const {
  if (episodes.size() != actions.size())
    fail("EnvironmentPool::step: {} episodes but {} actions; one action per episode", episodes.size(), actions.size());
  std::vector<bool> seen(environments_.size(), false);
  for (size_t e : episodes) {
    if (e >= environments_.size())
      fail("EnvironmentPool::step: episode {} is out of range; the pool holds {}", e, environments_.size());
    if (seen[e]) fail("EnvironmentPool::step: episode {} is listed twice", e);
    seen[e] = true;
  }
}

std::vector<StepResult> EnvironmentPool::step(const std::vector<size_t>& episodes, const std::vector<Action>& actions) {
  check_step(episodes, actions);
  std::vector<StepResult> out;
  out.reserve(episodes.size());
  for (size_t i = 0; i < episodes.size(); ++i) out.push_back(environments_[episodes[i]]->step(actions[i]));
  return out;
}

EnvironmentPoolFactory pool_of(std::function<std::unique_ptr<Environment>()> make_environment) {
  if (!make_environment) fail("pool_of: the environment factory is empty");
  return [make_environment](size_t episodes) {
    std::vector<std::unique_ptr<Environment>> envs;
    for (size_t i = 0; i < episodes; ++i) envs.push_back(make_environment());
    return std::make_unique<EnvironmentPool>(std::move(envs));
  };
}

}  // namespace turnrl
