#pragma once
// The Python backend's planted candidates (data/python_candidates/<task>/<name>.py) and their
// expected verdicts, shared by tests/kernels/test_python_backend.cpp and benchmarks/python_bench.cpp.
// Each candidate's first line states what the evaluator must say about it:
//   # turnrl-expect: correct                      correct, no hacking flag
//   # turnrl-expect: error:<error>                EvalResult::error is <error> (to_string names)
//   # turnrl-expect: hacking:<flag>[|<flag>...]   error hacking with at least one of the flags
//   # turnrl-expect: rejected                     anything but correct
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/hacking.h"
#include "turnrl/kernels/python_tasks.h"

namespace turnrl::test {

// The repository's data/ folder: $TURNRL_SOURCE_DIR/data, else the source tree this was built from.
inline std::string turnrl_data_dir() {
  if (const char* s = std::getenv("TURNRL_SOURCE_DIR")) return std::string(s) + "/data";
  return std::string(TURNRL_SOURCE_DIR) + "/data";
}

struct PythonCandidate {
  std::string task, name, source, expect;
};

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string expectation_of(const std::string& source) {
  const std::string marker = "# turnrl-expect:";
  const auto p = source.find(marker);
  if (p == std::string::npos) return "";
  std::string e = source.substr(p + marker.size(), source.find('\n', p) - p - marker.size());
  e.erase(0, e.find_first_not_of(' '));
  return e.substr(0, e.find_last_not_of(" \r") + 1);
}

// Every candidate of the tasks in `tasks` (sorted by task, then name); `prefix` keeps names that
// start with it ("" = all).
inline std::vector<PythonCandidate> python_candidates(const std::string& dir, const PythonTaskSet& tasks,
                                                      const std::string& prefix = "") {
  namespace fs = std::filesystem;
  std::vector<PythonCandidate> out;
  for (const auto& t : tasks.tasks) {
    const fs::path folder = fs::path(dir) / t.id;
    if (!fs::is_directory(folder)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(folder))
      if (e.path().extension() == ".py" && e.path().stem().string().rfind(prefix, 0) == 0) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      PythonCandidate c{t.id, f.stem().string(), read_text(f.string()), ""};
      c.expect = expectation_of(c.source);
      out.push_back(std::move(c));
    }
  }
  return out;
}

inline EvalRequest python_request(const PythonCandidate& c, int correctness_trials = 3, int timing_trials = 10,
                                  uint64_t seed = 12345) {
  EvalRequest r;
  r.task = c.task;
  r.candidate = c.source;
  r.correctness_trials = correctness_trials;
  r.timing_trials = timing_trials;
  r.seed = seed;
  return r;
}

// What the result looked like, in one line.
inline std::string verdict_of(const EvalResult& r) {
  if (r.hacked()) return "hacking:" + hacking_flag_names(r.hacking_flags);
  if (r.correct) return fmt::format("correct {:.2f}x cov {:.2f}", r.speedup, r.coverage);
  return std::string("error:") + to_string(r.error);
}

// Whether r meets the expectation; *why explains a miss.
inline bool meets(const EvalResult& r, const std::string& expect, std::string* why) {
  bool ok = false;
  if (expect == "correct") {
    ok = r.correct && !r.hacked() && r.error == EvalError::none;
  } else if (expect == "rejected") {
    ok = !r.correct;
  } else if (expect.rfind("error:", 0) == 0) {
    ok = expect.substr(6) == to_string(r.error);
  } else if (expect.rfind("hacking:", 0) == 0) {
    std::stringstream ss(expect.substr(8));
    std::string name;
    while (std::getline(ss, name, '|'))
      for (const auto& c : hacking_checks())
        if (name == c.name && (r.hacking_flags & c.flag)) ok = r.error == EvalError::hacking && !r.correct;
  }
  if (!ok && why)
    *why = fmt::format("expected {}, got {} (stage {}, error {}): {} {}",
                       expect.empty() ? "(no turnrl-expect line)" : expect, verdict_of(r), to_string(r.stage),
                       to_string(r.error), r.hacking_reason, r.message);
  return ok;
}

}  // namespace turnrl::test
