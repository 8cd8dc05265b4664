#pragma once
// `turnrl plot`: line charts of training metrics against the step, drawn into an RGB image and
// written as PNG by a small encoder of our own (stored deflate blocks, CRC-32, Adler-32), so no
// image library or Python is needed.
#include <cstdint>
#include <string>
#include <vector>

#include "turnrl/trainer/metrics.h"

namespace turnrl {

struct PlotSeries {
  std::string title;
  std::vector<double> x, y;  // non-finite y values are gaps
};

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // row-major RGB, 3 bytes a pixel
};

// One panel per series, stacked vertically; each has its title, y range labels and x range.
RgbImage render_line_charts(const std::vector<PlotSeries>& series, int width = 900, int panel_height = 170);

// PNG bytes of an RGB image (8-bit, no interlace).
std::string encode_png(const RgbImage& image);
uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc = 0);
uint32_t adler32(const uint8_t* data, size_t size, uint32_t adler = 1);

// The panels `turnrl plot` draws from metrics.jsonl rows: reward, speedup, correctness, fast@1.2,
// mismatch KL and PRS drop rate against "step" (a metric absent from every row gives an empty
// panel).
std::vector<PlotSeries> training_series(const std::vector<Metrics>& rows);

// Writes render_line_charts(training_series(rows)) to `png_path`.
void plot_metrics(const std::vector<Metrics>& rows, const std::string& png_path);

}  // namespace turnrl
