#pragma once
// Where turnrl finds its own files at run time: the helper programs it starts (evaluator
// workers), the headers candidates compile against (turnrl/kernels/candidate_api.h), and its data
// (the Python worker script python/turnrl_eval_worker.py, the shipped configs/). An installed
// turnrl stays usable when its prefix is moved (relocatable): each kind is looked up, in order,
//   1. in the folder an environment variable names (TURNRL_WORKER_DIR, TURNRL_INCLUDE_DIR,
//      TURNRL_DATA_DIR),
//   2. relative to the running program: its own folder (helpers), ../libexec/turnrl (helpers),
//      ../include (headers), ../share/turnrl (data),
//   3. the same relative to the `turnrl` program found on PATH (a user's own program that links
//      the library lives elsewhere),
//   4. under the install prefix configured at build time,
//   5. only when the running program lives in the build tree: the build's bin/ and the source tree.
#include <string>
#include <vector>

namespace turnrl {

enum class TurnrlFiles { helpers, headers, data };

// The folders searched for `kind`, in lookup order (existing or not), each once.
std::vector<std::string> turnrl_search_dirs(TurnrlFiles kind);

// The first `<folder>/<relative>` of turnrl_search_dirs(kind) that exists (and is executable for
// helpers). Throws turnrl::Error naming `relative`, the folders tried and the variable that
// overrides them.
std::string find_turnrl_file(TurnrlFiles kind, const std::string& relative);

}  // namespace turnrl
