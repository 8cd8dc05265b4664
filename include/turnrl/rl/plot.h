#pragma once
// `turnrl plot`: line charts of training metrics against the step, one panel per metric, several
// runs overlaid in each panel (an ablation plot) with a legend. Drawn into an RGB image with an
// embedded 5x7 bitmap font and written as a zlib-compressed PNG, so no image library or Python is
// needed (a plotting library would bring a font stack and a GUI toolkit for six chart elements).
#include <cstdint>
#include <string>
#include <vector>

#include "turnrl/rl/metrics.h"

namespace turnrl {

// One run's metrics.jsonl rows and the name its lines carry in the legend.
struct PlotRun {
  std::string label;
  std::vector<Metrics> rows;
};

struct PlotOptions {
  // Metric names, one panel each; empty: the default panels present in any run.
  std::vector<std::string> metrics;
  int width = 1200;         // pixels, the whole image
  int panel_height = 300;   // pixels, one panel row

  PlotOptions& with_metrics(std::vector<std::string> v) { return metrics = std::move(v), *this; }
  PlotOptions& with_width(int v) { return width = v, *this; }
  PlotOptions& with_panel_height(int v) { return panel_height = v, *this; }
};

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // row-major RGB, 3 bytes a pixel
};

// The panels drawn when PlotOptions::metrics is empty (verl's names where verl has the metric).
std::vector<std::string> default_plot_metrics();

// Reads a metrics.jsonl for plotting. Throws turnrl::Error when the file cannot be read, is not
// JSON lines, or has no row with a "step" (not a metrics file).
PlotRun read_plot_run(const std::string& metrics_path, const std::string& label);

// Tick positions for an axis over [lo, hi] (lo < hi): multiples of 1, 2 or 5 times a power of ten
// (at least min_spacing apart: 1 for steps), about `max_ticks` intervals, covering [lo, hi] (the
// first <= lo, the last >= hi).
std::vector<double> nice_ticks(double lo, double hi, int max_ticks = 6, double min_spacing = 0);

// The tick labels of `ticks`, with as many decimals as their spacing needs ("0.25", "1e+06").
std::vector<std::string> tick_labels(const std::vector<double>& ticks);

// One panel per metric (two columns when there are more than three): axes with ticks at nice
// numbers and their labels, gridlines, the x title "step", the metric as y title, one colour per
// run, a marker on every point of short series (a single step stays visible), a legend when
// there are several runs. Throws turnrl::Error naming a requested metric that no run has.
RgbImage render_metric_panels(const std::vector<PlotRun>& runs, const PlotOptions& options = {});

// PNG bytes of an RGB image (8-bit, no interlace, IDAT deflated by zlib at level 6).
std::string encode_png(const RgbImage& image);

// Writes encode_png(render_metric_panels(runs, options)) to `png_path`.
void plot_runs(const std::vector<PlotRun>& runs, const std::string& png_path, const PlotOptions& options = {});

}  // namespace turnrl
