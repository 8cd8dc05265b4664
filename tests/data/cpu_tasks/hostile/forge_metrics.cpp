// Appends a forged line to the run's metrics.jsonl.
#include <turnrl/kernels/candidate_api.h>
#include <fstream>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  std::ofstream("@OUT@/run/metrics.jsonl", std::ios::app) << "{\"step\": 99, \"reward\": 1e9}\n";
  return 1;
}
