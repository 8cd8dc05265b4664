// `turnrl plot`: one or more metrics.jsonl files -> a PNG of line charts against the step. Several
// files are overlaid in each panel, one colour per run (an ablation plot).
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "turnrl/rl/plot.h"

namespace turnrl::cli {
namespace {

struct PlotArgs {
  std::vector<std::string> files, labels, metrics;
  std::string out;
  PlotOptions options;
};

// A run's legend label: its run directory's name (runs/grpo/metrics.jsonl -> grpo), or the whole
// path where two runs would share a name.
std::vector<std::string> default_labels(const std::vector<std::string>& files) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  bool unique = true;
  for (const std::string& f : files) {
    std::string name = std::filesystem::path(f).parent_path().filename().string();
    if (name.empty() || name == ".") name = f;
    unique = unique && seen.insert(name).second;
    names.push_back(name);
  }
  return unique ? names : files;
}

void run_plot(PlotArgs& a) {
  if (!a.labels.empty() && a.labels.size() != a.files.size())
    throw CLI::ValidationError("--labels", fmt::format("{} label(s) for {} file(s)", a.labels.size(), a.files.size()));
  const std::vector<std::string> labels = a.labels.empty() ? default_labels(a.files) : a.labels;
  std::vector<PlotRun> runs;
  for (size_t i = 0; i < a.files.size(); ++i) runs.push_back(read_plot_run(a.files[i], labels[i]));
  const std::string out =
      !a.out.empty() ? a.out : (std::filesystem::path(a.files[0]).parent_path() / "metrics.png").string();
  a.options.metrics = a.metrics;
  plot_runs(runs, out, a.options);
  size_t steps = 0;
  for (const PlotRun& r : runs) steps += r.rows.size();
  fmt::print("wrote {} ({} run(s), {} step(s))\n", out, runs.size(), steps);
}

}  // namespace

void add_plot_command(CLI::App& app) {
  auto a = std::make_shared<PlotArgs>();
  CLI::App* c = app.add_subcommand("plot", "Plot metrics.jsonl files against the step (several files: an ablation plot)");
  c->add_option("METRICS", a->files, "metrics.jsonl files written by turnrl train (run.dir/metrics.jsonl)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--out,-o", a->out, "PNG to write (default: metrics.png beside the first file)");
  c->add_option("--metrics,-m", a->metrics, "Comma-separated metrics, one panel each (default: reward, correctness, speedup, ...)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("--labels", a->labels, "Comma-separated legend labels, one per file (default: the run directories' names)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("--width", a->options.width, "Image width in pixels")->capture_default_str()->check(integer_in(200, 10000));
  c->add_option("--panel-height", a->options.panel_height, "Height of one row of panels in pixels")
      ->capture_default_str()
      ->check(integer_in(120, 4000));
  c->footer(
      "Examples:\n"
      "  turnrl plot runs/cpu_default/metrics.jsonl\n"
      "  turnrl plot runs/trloo/metrics.jsonl runs/grpo/metrics.jsonl --metrics critic/score/mean,actor/entropy "
      "--out ablation.png");
  c->callback([a] { run_plot(*a); });
}

}  // namespace turnrl::cli
