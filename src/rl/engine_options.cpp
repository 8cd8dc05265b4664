#include "turnrl/rl/engine_options.h"

namespace turnrl {

SamplingOptions rollout_sampling(const EngineOptions& c) {
  return SamplingOptions().temp(c.sampling.temperature).topk(c.sampling.top_k).topp(c.sampling.top_p);
}

}  // namespace turnrl
