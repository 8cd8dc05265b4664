#include "turnrl/rl/batch_stage.h"

#include <ATen/CPUGeneratorImpl.h>

#include "turnrl/core/error.h"
#include "turnrl/core/random.h"

namespace turnrl {
namespace {

class FunctionStage : public BatchStage {
 public:
  FunctionStage(std::function<Metrics(RolloutBatch&, const StageContext&)> apply, Point point)
      : apply_(std::move(apply)), point_(point) {}
  Point point() const override { return point_; }
  Metrics apply(RolloutBatch& rollouts, const StageContext& context) override { return apply_(rollouts, context); }

 private:
  std::function<Metrics(RolloutBatch&, const StageContext&)> apply_;
  Point point_;
};

}  // namespace

uint64_t stage_seed(uint64_t seed, int64_t step, uint64_t stage) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(step) + 1) * 0xBF58476D1CE4E5B9ull ^ stage * 0x94D049BB133111EBull;
  return splitmix64(state);
}

std::shared_ptr<BatchStage> make_stage(std::function<Metrics(RolloutBatch&, const StageContext&)> apply,
                                       BatchStage::Point point) {
  if (!apply) fail("make_stage: the stage function is empty");
  return std::make_shared<FunctionStage>(std::move(apply), point);
}

Metrics MeaningfulTurnMaskStage::apply(RolloutBatch& r, const StageContext&) {
  if (!enabled_) return {{"filter/void_turns", 0.0}};
  const TurnMaskReport report = apply_meaningful_turn_mask(r.batch);
  return {{"filter/void_turns", double(report.masked)}};
}

Metrics GroupFilterStage::apply(RolloutBatch& r, const StageContext& context) {
  at::Generator generator =
      at::make_generator<at::CPUGeneratorImpl>(stage_seed(options_.seed, context.step, StageSeed::group_filter));
  const GroupFilterReport report = filter_groups(r.batch, options_, generator);
  Metrics m = {{"filter/groups_kept", double(report.kept.size())},
               {"filter/groups_low_std", double(report.low_std.size())},
               {"filter/groups_all_equal", double(report.all_equal.size())},
               {"filter/groups_too_small", double(report.too_small.size())}};
  if (int64_t(report.kept.size()) != int64_t(r.task_ids.size())) r = select_rollout_rows(r, report.keep_rows);
  return m;
}

}  // namespace turnrl
