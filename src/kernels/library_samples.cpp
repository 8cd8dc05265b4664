#include "library_samples.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>

#include <fmt/format.h>

namespace turnrl::eval_detail {
namespace {

// The file name of a mapping's path, without the " (deleted)" the kernel appends once it is removed.
std::string file_name(const std::string& mapping) {
  std::string name = mapping;
  const std::string deleted = " (deleted)";
  if (name.size() > deleted.size() && name.compare(name.size() - deleted.size(), deleted.size(), deleted) == 0)
    name.resize(name.size() - deleted.size());
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

bool is_c_runtime(const std::string& name) {
  if (name == "[vdso]") return true;
  for (const char* prefix : {"libc.so", "libm.so", "libmvec.so", "libstdc++.so", "libgcc_s.so", "ld-linux"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

CodeOwner code_owner(const CodeSamples& s, const std::string& worker_program) {
  if (s.mapping == kInsideServedRoutine) return CodeOwner::served_routine;
  const std::string name = file_name(s.mapping);
  if (s.since_start) {
    // Compared byte for byte with the object the request carried (SandboxWorker::expect_loaded_code):
    // the candidate's code is that object's bytes, whatever the mapping is called, and nothing else
    // is (a library's file copied under the object's name, or the object's file rewritten after it
    // was loaded). Where the memory could not be read, by name: the worker loads each candidate as
    // ./candidate-<n>.so and removes the file (sandbox_child::load_shared_object); any other code
    // mapped after start-up is not the candidate's, a runtime library mapped a second time included.
    if (s.match != CodeMatch::unchecked) return s.match == CodeMatch::loaded_object ? CodeOwner::candidate : CodeOwner::library;
    static const std::regex candidate_object(R"(candidate-[0-9]+\.so)");
    return std::regex_match(name, candidate_object) ? CodeOwner::candidate : CodeOwner::library;
  }
  if (is_c_runtime(name)) return CodeOwner::candidate;
  if (!s.mapping.empty() && s.mapping[0] == '/' && name == file_name(worker_program)) return CodeOwner::harness;
  return CodeOwner::library;
}

SampledCode classify_samples(const std::vector<CodeSamples>& samples, double period_seconds,
                             const std::string& worker_program) {
  SampledCode out;
  std::map<std::string, int64_t> library_by_mapping;
  for (const CodeSamples& s : samples) {
    switch (code_owner(s, worker_program)) {
      case CodeOwner::candidate: out.candidate += s.samples; break;
      case CodeOwner::harness: out.harness += s.samples; break;
      case CodeOwner::served_routine: out.served_routine += s.samples; break;
      case CodeOwner::library:
        out.library += s.samples;
        library_by_mapping[file_name(s.mapping)] += s.samples;
        break;
    }
  }
  out.library_us = 1e6 * period_seconds * double(out.library);
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [name, n] : library_by_mapping) order.emplace_back(-n, name);
  std::sort(order.begin(), order.end());
  for (const auto& [n, name] : order)
    out.library_mappings += fmt::format("{}{} ({})", out.library_mappings.empty() ? "" : ", ", name, -n);
  return out;
}

double hidden_library_us(int64_t library_samples, double period_us) {
  constexpr int64_t kToleratedSamples = 2;
  return library_samples > kToleratedSamples ? period_us * double(library_samples) : 0.0;
}

double hidden_library_us(const LibrarySamples& timed, const LibrarySamples& dense) {
  const double own = hidden_library_us(timed.samples, timed.period_us);
  if (own > 0 || dense.calls == 0) return own;
  return hidden_library_us(dense.samples, dense.period_us) / double(dense.calls) * double(timed.calls);
}

double served_routine_us(double marked_us, int64_t samples_inside, double period_us) {
  if (period_us <= 0) return marked_us;
  const double expected = std::max(0.0, marked_us) / period_us;
  const double sampled_us = period_us * double(samples_inside);
  return double(samples_inside) > expected + 2.0 + 3.0 * std::sqrt(expected) ? std::max(marked_us, sampled_us)
                                                                               : marked_us;
}

}  // namespace turnrl::eval_detail
