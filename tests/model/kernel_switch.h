#pragma once
// A process-wide kernel switch of the fused GPU path (decode_gemm.cuh's set_decode_gemm,
// decode_attention.cuh's set_decode_attention_from_qkv and set_decode_attention_tensor_cores) set
// for a scope, then back as it was, also when a REQUIRE throws out of the scope.

namespace turnrl::test {

class KernelSwitch {
 public:
  KernelSwitch(bool (*get)(), void (*set)(bool), bool on) : set_(set), was_(get()) { set(on); }
  ~KernelSwitch() { set_(was_); }
  KernelSwitch(const KernelSwitch&) = delete;
  KernelSwitch& operator=(const KernelSwitch&) = delete;

 private:
  void (*set_)(bool);
  bool was_;
};

}  // namespace turnrl::test
