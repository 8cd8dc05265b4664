#pragma once
// Helpers shared by the eval tests: candidate sources under tests/data/cpu_tasks and requests.
#include <fstream>
#include <sstream>
#include <string>

#include "turnrl/kernels/cpu_backend.h"

namespace turnrl::test {

inline std::string candidate_source(const std::string& task_dir, const std::string& name) {
  const std::string path = std::string(TURNRL_TEST_DATA_DIR) + "/cpu_tasks/" + task_dir + "/" + name + ".cpp";
  std::ifstream f(path);
  if (!f) throw std::runtime_error("missing test candidate " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A request with few trials (fast tests) and a fixed seed (reproducible).
inline EvalRequest request(const std::string& task, const std::string& name, const std::string& dir = "") {
  EvalRequest r;
  r.task = task;
  r.candidate = candidate_source(dir.empty() ? task : dir, name);
  r.correctness_trials = 3;
  r.timing_trials = 10;
  r.seed = 12345;
  return r;
}

inline CpuEvalOptions test_options() {
  CpuEvalOptions o;
  o.workers = 2;
  o.warmup = 1;
  o.limits.wall(10).cpu(10);
  return o;
}

}  // namespace turnrl::test
