#pragma once
// Metrics of a run: one JSON object per line (metrics.jsonl), flat "name": number pairs with a
// "step" key, plus the kernel statistics the paper reports (pass@k, fast@p).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "turnrl/core/checked_write.h"

namespace turnrl {

using Metrics = std::map<std::string, double>;

// {"a": 1, "b": 0.5}: keys in map order, numbers written so they read back exactly; non-finite
// values become null.
std::string metrics_to_json(const Metrics& metrics);
// Parses one flat JSON object of numbers (and nulls, read as NaN). Strings, arrays and nested
// objects are skipped. Throws turnrl::Error on malformed JSON.
Metrics parse_metrics_json(const std::string& line);
// Every complete line of a metrics.jsonl file (a torn last line from a killed run is ignored).
std::vector<Metrics> read_metrics_jsonl(const std::string& path);

// Appends JSON lines to a file, each flushed to disk; a failed write throws turnrl::Error naming
// the file and the system's reason (checked_write.h), so no line is lost without a word.
class JsonlWriter {
 public:
  JsonlWriter() = default;
  explicit JsonlWriter(const std::string& path);
  void write_line(const std::string& json);
  bool is_open() const { return out_.is_open(); }

 private:
  CheckedFile out_;
};

// A line truncate_metrics_after() dropped although it was not past the resumed step: garbage
// (not a JSON object) or a last line torn by a killed writer. The caller tells the user.
struct DroppedLine {
  size_t line = 0;     // 1-based
  std::string text;    // the line, cut to 120 bytes
  std::string reason;
};

// Rewrites metrics.jsonl keeping the complete lines whose "step" is <= `step` (resuming from a
// checkpoint at `step` drops what the killed run logged after it). Returns the lines dropped for
// being unreadable; a missing file is nothing to do.
std::vector<DroppedLine> truncate_metrics_after(const std::string& path, int64_t step);

// Unbiased pass@k from n samples of which c are correct (Chen et al. 2021): 1 - C(n-c, k)/C(n, k).
double pass_at_k(int64_t n, int64_t c, int64_t k);

// fast@p: the fraction of samples whose best speedup is >= p, where a sample that is never
// correct (or hacked) counts as speedup 0 (the reference's fast@p_in_all).
double fast_at_p(const std::vector<double>& best_speedups, double p);

// The trainer's metric names that verl logs under another name: {turnrl name, verl name}
// (actor/clip_frac -> actor/pg_clipfrac, optim/grad_norm -> actor/grad_norm, time/step_s ->
// timing_s/step, ...). docs/training.md lists them.
const std::vector<std::pair<std::string, std::string>>& verl_metric_aliases();
// Adds the verl name of every metric in verl_metric_aliases() that `metrics` has (the turnrl name
// stays), so that dashboards built for verl runs read turnrl runs unchanged.
void add_verl_metric_names(Metrics& metrics);

// JSON string literal of `text` (quotes and escapes added; bytes that are not UTF-8 become U+FFFD).
std::string json_string(const std::string& text);

}  // namespace turnrl
