#include "turnrl/rl/plot.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"

namespace turnrl {
namespace {

using Rgb = std::array<uint8_t, 3>;

// A 5x7 bitmap font (row-major, bit 4 = left column) for the characters titles and labels use;
// letters are drawn upper case.
const std::array<uint8_t, 7>* glyph(char c) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-/@_:()+=% ,[]";
  static const std::array<uint8_t, 7> font[] = {
      {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E},
      {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}, {0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E},
      {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}, {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10},
      {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}, {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11},
      {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}, {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},
      {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}, {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F},
      {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}, {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11},
      {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10},
      {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}, {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11},
      {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}, {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},
      {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04},
      {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}, {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11},
      {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F},
      {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},
      {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},
      {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},
      {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},
      {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},
      {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}, {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00},
      {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10}, {0x0E, 0x11, 0x17, 0x15, 0x17, 0x10, 0x0E},
      {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}, {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00},
      {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}, {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08},
      {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}, {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00},
      {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
      {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}, {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E},
      {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E},
  };
  const size_t i = chars.find(char(std::toupper(static_cast<unsigned char>(c))));
  return i == std::string::npos ? nullptr : &font[i];
}

constexpr int kGlyphAdvance = 6;  // font pixels from one character to the next (5 wide + 1 gap)

struct Canvas {
  RgbImage& img;
  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= img.width || y >= img.height) return;
    uint8_t* p = &img.pixels[(size_t(y) * size_t(img.width) + size_t(x)) * 3];
    p[0] = c[0], p[1] = c[1], p[2] = c[2];
  }
  void fill(int x0, int y0, int x1, int y1, Rgb c) {
    for (int y = y0; y <= y1; ++y)
      for (int x = x0; x <= x1; ++x) set(x, y, c);
  }
  // A two-pixel-wide line (Bresenham), thick enough to tell colours apart.
  void line(int x0, int y0, int x1, int y1, Rgb c) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    while (true) {
      set(x0, y0, c), set(x0, y0 + 1, c), set(x0 + 1, y0, c);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  // Text at `scale` pixels a font pixel, left edge x, top y; `vertical` runs bottom to top (a y
  // axis title), with (x, y) its bottom-left corner.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 2, bool vertical = false) {
    int pen = 0;
    for (char ch : s) {
      if (const auto* g = glyph(ch))
        for (int row = 0; row < 7; ++row)
          for (int col = 0; col < 5; ++col)
            if ((*g)[size_t(row)] & (0x10 >> col)) {
              const int u = (pen + col) * scale, v = row * scale;  // along and across the text
              if (vertical) fill(x + v, y - u - scale + 1, x + v + scale - 1, y - u, c);
              else fill(x + u, y + v, x + u + scale - 1, y + v + scale - 1, c);
            }
      pen += kGlyphAdvance;
    }
  }
};

int text_width(const std::string& s, int scale = 2) { return int(s.size()) * kGlyphAdvance * scale - scale; }

// matplotlib's "tab10" colours, one per run.
const Rgb kPalette[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},  {148, 103, 189},
                        {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};
const Rgb kInk = {40, 40, 40}, kGrid = {225, 225, 225}, kAxis = {110, 110, 110}, kWhite = {255, 255, 255};

Rgb run_colour(size_t run) { return kPalette[run % (sizeof kPalette / sizeof kPalette[0])]; }

struct Point {
  double x, y;
};

// The finite (step, value) pairs of one metric in one run; a non-finite value is a gap (NaN x).
std::vector<Point> metric_points(const PlotRun& run, const std::string& metric) {
  std::vector<Point> out;
  for (const Metrics& m : run.rows) {
    const auto step = m.find("step"), v = m.find(metric);
    if (step == m.end() || v == m.end()) continue;
    if (std::isfinite(step->second) && std::isfinite(v->second)) out.push_back({step->second, v->second});
    else if (!out.empty() && std::isfinite(out.back().x)) out.push_back({NAN, NAN});
  }
  return out;
}

// Series with at most this many points get a marker on every point.
constexpr size_t kMarkerMaxPoints = 60;

void draw_panel(Canvas& c, const std::vector<PlotRun>& runs, const std::string& metric, int ox, int oy, int pw, int ph) {
  const int left = ox + 120, right = ox + pw - 24, top = oy + 34, bottom = oy + ph - 56;
  c.text(left, oy + 10, metric, kInk);
  c.text(ox + 8, (top + bottom) / 2 + text_width(metric, 1) / 2, metric, kInk, 1, true);
  std::vector<std::vector<Point>> series;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const PlotRun& run : runs) {
    series.push_back(metric_points(run, metric));
    for (const Point& p : series.back())
      if (std::isfinite(p.x))
        xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x), ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
  }
  if (!std::isfinite(xmin)) {
    c.fill(left, top, right, top, kAxis), c.fill(left, bottom, right, bottom, kAxis);
    c.text(left + 10, (top + bottom) / 2 - 7, "no finite values", kAxis);
    return;
  }
  if (xmax == xmin) xmin -= 1, xmax += 1;  // a single step sits in the middle
  if (ymax - ymin < 1e-12 * std::max(1.0, std::abs(ymax))) {
    const double pad = ymax == 0 ? 0.5 : 0.1 * std::abs(ymax);
    ymin -= pad, ymax += pad;
  }
  const std::vector<double> xt = nice_ticks(xmin, xmax, 8, 1.0), yt = nice_ticks(ymin, ymax, 5);
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  auto px = [&](double x) { return left + int(std::lround((x - x0) / (x1 - x0) * (right - left))); };
  auto py = [&](double y) { return bottom - int(std::lround((y - y0) / (y1 - y0) * (bottom - top))); };
  const std::vector<std::string> xl = tick_labels(xt), yl = tick_labels(yt);
  for (size_t i = 0; i < yt.size(); ++i) {
    const int y = py(yt[i]);
    c.fill(left, y, right, y, kGrid);
    c.fill(left - 5, y, left - 1, y, kAxis);
    c.text(left - 9 - text_width(yl[i]), y - 7, yl[i], kInk);
  }
  for (size_t i = 0; i < xt.size(); ++i) {
    const int x = px(xt[i]);
    c.fill(x, top, x, bottom, kGrid);
    c.fill(x, bottom + 1, x, bottom + 5, kAxis);
    c.text(x - text_width(xl[i]) / 2, bottom + 9, xl[i], kInk);
  }
  c.fill(left, top, right, top, kAxis), c.fill(left, bottom, right, bottom, kAxis);
  c.fill(left, top, left, bottom, kAxis), c.fill(right, top, right, bottom, kAxis);
  c.text((left + right) / 2 - text_width("step") / 2, bottom + 30, "step", kInk);
  for (size_t r = 0; r < series.size(); ++r) {
    const std::vector<Point>& s = series[r];
    const Rgb colour = run_colour(r);
    size_t finite = 0;
    for (const Point& p : s) finite += std::isfinite(p.x);
    for (size_t k = 0; k < s.size(); ++k) {
      if (!std::isfinite(s[k].x)) continue;
      const int x = px(s[k].x), y = py(s[k].y);
      if (k + 1 < s.size() && std::isfinite(s[k + 1].x)) c.line(x, y, px(s[k + 1].x), py(s[k + 1].y), colour);
      const bool isolated = (k == 0 || !std::isfinite(s[k - 1].x)) && (k + 1 == s.size() || !std::isfinite(s[k + 1].x));
      if (finite <= kMarkerMaxPoints || isolated) c.fill(x - 2, y - 2, x + 3, y + 3, colour);
    }
  }
}

constexpr int kLegendHeight = 34;

void draw_legend(Canvas& c, const std::vector<PlotRun>& runs) {
  int x = 20;
  for (size_t r = 0; r < runs.size(); ++r) {
    const Rgb colour = run_colour(r);
    c.fill(x, 16, x + 27, 17, colour);
    c.fill(x + 11, 14, x + 16, 19, colour);
    c.text(x + 34, 10, runs[r].label, kInk);
    x += 34 + text_width(runs[r].label) + 30;
  }
}

void put32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += char((v >> s) & 0xFF);
}

void chunk(std::string& out, const char* type, const std::string& data) {
  put32(out, uint32_t(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put32(out, uint32_t(::crc32(0L, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()))));
}

}  // namespace

std::vector<std::string> default_plot_metrics() {
  return {"critic/score/mean",    "kernel/correct", "kernel/speedup",       "kernel/fast@1.2",
          "actor/entropy",        "response_length/mean", "mismatch/mismatch_kl", "prs/drop_rate"};
}

PlotRun read_plot_run(const std::string& metrics_path, const std::string& label) {
  PlotRun run{label, read_metrics_jsonl(metrics_path)};
  const bool has_step = std::any_of(run.rows.begin(), run.rows.end(), [](const Metrics& m) { return m.count("step") > 0; });
  if (!has_step)
    fail("{}: no line has a \"step\" value ({} JSON line(s)); expected a metrics.jsonl written by turnrl train",
         metrics_path, run.rows.size());
  return run;
}

std::vector<double> nice_ticks(double lo, double hi, int max_ticks, double min_spacing) {
  require(std::isfinite(lo) && std::isfinite(hi) && hi > lo && max_ticks >= 1,
          fmt::format("nice_ticks: need finite lo < hi and max_ticks >= 1; got [{}, {}], {}", lo, hi, max_ticks));
  const double raw = (hi - lo) / max_ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double slack = 1e-9;  // 0.2 / 0.1 must count as 2, not a hair above it
  double spacing = (norm <= 1 + slack ? 1 : norm <= 2 + slack ? 2 : norm <= 5 + slack ? 5 : 10) * magnitude;
  spacing = std::max(spacing, min_spacing);
  const double first = std::floor(lo / spacing + 1e-9) * spacing;
  const auto count = int64_t(std::ceil((hi - first) / spacing - 1e-9));
  std::vector<double> ticks;
  for (int64_t i = 0; i <= count; ++i) {
    const double t = first + double(i) * spacing;
    ticks.push_back(std::abs(t) < spacing * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  std::vector<std::string> out;
  if (ticks.empty()) return out;
  const double spacing = ticks.size() > 1 ? ticks[1] - ticks[0] : std::max(std::abs(ticks[0]), 1.0);
  double largest = 0;
  for (double t : ticks) largest = std::max(largest, std::abs(t));
  const bool scientific = largest >= 1e6 || spacing < 1e-4;
  const int decimals = std::max(0, int(-std::floor(std::log10(spacing) + 1e-9)));
  for (double t : ticks) out.push_back(scientific ? fmt::format("{:.3g}", t) : fmt::format("{:.{}f}", t, decimals));
  return out;
}

RgbImage render_metric_panels(const std::vector<PlotRun>& runs, const PlotOptions& options) {
  require(!runs.empty(), "plot: no runs to draw");
  require(options.width >= 200 && options.panel_height >= 120,
          fmt::format("plot: width {} / panel_height {} too small; need >= 200 / >= 120", options.width,
                      options.panel_height));
  std::set<std::string> present;
  for (const PlotRun& run : runs)
    for (const Metrics& m : run.rows)
      for (const auto& kv : m) present.insert(kv.first);
  present.erase("step");
  std::vector<std::string> metrics;
  if (options.metrics.empty()) {
    for (const std::string& m : default_plot_metrics())
      if (present.count(m)) metrics.push_back(m);
    if (metrics.empty())
      fail("plot: none of the default metrics ({}) is in the runs; choose some of: {}",
           fmt::join(default_plot_metrics(), ", "), fmt::join(present, ", "));
  } else {
    for (const std::string& m : options.metrics)
      if (!present.count(m)) fail("plot: metric '{}' is in none of the runs; the runs have: {}", m, fmt::join(present, ", "));
    metrics = options.metrics;
  }
  const int columns = metrics.size() > 3 ? 2 : 1;
  const int rows = int((metrics.size() + size_t(columns) - 1) / size_t(columns));
  const int legend = runs.size() > 1 ? kLegendHeight : 0;
  RgbImage img;
  img.width = options.width;
  img.height = legend + rows * options.panel_height;
  img.pixels.assign(size_t(img.width) * size_t(img.height) * 3, 255);
  Canvas c{img};
  const int panel_width = options.width / columns;
  for (size_t i = 0; i < metrics.size(); ++i)
    draw_panel(c, runs, metrics[i], int(i % size_t(columns)) * panel_width,
               legend + int(i / size_t(columns)) * options.panel_height, panel_width, options.panel_height);
  if (legend) draw_legend(c, runs);
  return img;
}

std::string encode_png(const RgbImage& img) {
  require(img.width > 0 && img.height > 0 && img.pixels.size() == size_t(img.width) * size_t(img.height) * 3,
          "encode_png: the pixel buffer does not match the image size");
  std::string raw;  // scanlines, each with filter byte 0 (none): flat-colour charts deflate well as they are
  const size_t stride = size_t(img.width) * 3;
  raw.reserve(size_t(img.height) * (stride + 1));
  for (int y = 0; y < img.height; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(&img.pixels[size_t(y) * stride]), stride);
  }
  uLongf size = compressBound(uLong(raw.size()));
  std::string z(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(&z[0]), &size, reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()),
                6) != Z_OK)
    fail("encode_png: zlib could not compress {} bytes of scanlines", raw.size());
  z.resize(size);
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put32(ihdr, uint32_t(img.width));
  put32(ihdr, uint32_t(img.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, deflate, adaptive filters, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", "");
  return png;
}

void plot_runs(const std::vector<PlotRun>& runs, const std::string& png_path, const PlotOptions& options) {
  write_file(png_path, encode_png(render_metric_panels(runs, options)));
}

}  // namespace turnrl
