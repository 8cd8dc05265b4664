#include "turnrl/rl/episode_log.h"

#include <fmt/format.h>

#include "turnrl/rl/metrics.h"  // json_string

namespace turnrl {

std::string episode_lines(const RolloutBatch& r, int64_t step, int64_t max_episodes) {
  std::string out;
  const torch::Tensor traj = r.batch.traj.cpu().contiguous(), group = r.batch.group.cpu().contiguous();
  const torch::Tensor reward = r.batch.reward.to(torch::kCPU, torch::kDouble).contiguous();
  const int64_t rows = r.batch.size();
  int64_t episodes = 0;
  for (int64_t i = 0; i < rows && episodes < max_episodes;) {
    const int64_t e = traj.data_ptr<int64_t>()[i], g = group.data_ptr<int64_t>()[i];
    std::string turns;
    for (; i < rows && traj.data_ptr<int64_t>()[i] == e; ++i) {
      if (!turns.empty()) turns += ", ";
      const std::string extra = r.payloads[size_t(i)] ? r.payloads[size_t(i)]->json_fields() : std::string();
      turns += fmt::format("{{\"observation\": {}, \"action\": {}, \"reward\": {}{}{}}}",
                           json_string(r.observations[size_t(i)]), json_string(r.actions[size_t(i)]),
                           reward.data_ptr<double>()[i], extra.empty() ? "" : ", ", extra);
    }
    out += fmt::format("{{\"step\": {}, \"task\": {}, \"episode\": {}, \"turns\": [{}]}}\n", step,
                       json_string(r.task_ids[size_t(g)]), e, turns);
    ++episodes;
  }
  return out;
}

}  // namespace turnrl
