#pragma once
// Float32 master weights for parameters held in a lower precision (bf16, fp16): the optimizer
// steps float32 copies, with float32 AdamW states, and the model gets the result rounded to its
// dtype, as FSDP's mixed precision and Megatron's fp32 main parameters do. bf16 keeps 8 bits of
// mantissa: an AdamW update of lr 1e-6 on a weight of 0.02 is far below half its spacing (6e-5)
// and would round away on the bf16 weight itself; on the master it accumulates.
//
//   MasterWeights masters(policy.parameters());
//   torch::optim::AdamW optimizer(masters.masters(), ...);
//   ... backward on the model ...;  masters.gather_gradients();
//   clip_grad_norm_(masters.masters(), 1.0);  optimizer.step();  masters.publish();
#include <string>
#include <vector>

#include <torch/types.h>

namespace turnrl {

class MasterWeights {
 public:
  // params: the model's trainable parameters. enabled: those of a floating dtype narrower than
  // float32 get a float32 master; float32 and wider ones, and all when !enabled, are their own.
  explicit MasterWeights(std::vector<torch::Tensor> params, bool enabled = true);

  // What the optimizer steps and the gradient norm is taken over, in parameter order.
  const std::vector<torch::Tensor>& masters() const { return masters_; }
  // Whether any parameter has a separate master.
  bool any() const { return separate_ > 0; }

  // Every parameter's and master's .grad zeroed (where defined): before a new accumulation.
  void zero_gradients();
  // Each separate master's .grad := its parameter's .grad in float32 (zeros when undefined), and
  // the parameter's .grad is released (the next backward starts it afresh).
  void gather_gradients();
  // Each separate master's value into its parameter (rounded to the parameter's dtype).
  void publish();
  // Each separate master := its parameter's value (after the model's weights were loaded).
  void reset_from_model();

  // The separate masters, float32, in one file (checkpoints: the model file holds only their
  // rounding); load() reads what save() wrote, checking count and shapes.
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  std::vector<torch::Tensor> params_, masters_;
  size_t separate_ = 0;
};

}  // namespace turnrl
