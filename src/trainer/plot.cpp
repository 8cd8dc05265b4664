#include "turnrl/trainer/plot.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"

namespace turnrl {
namespace {

// A 5x7 bitmap font (row-major, bit 4 = left column) for the characters titles and labels use;
// letters are drawn upper case.
const std::array<uint8_t, 7>* glyph(char c) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-/@_:()+=% ";
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
  };
  const size_t i = chars.find(char(std::toupper(static_cast<unsigned char>(c))));
  return i == std::string::npos ? nullptr : &font[i];
}

struct Canvas {
  RgbImage& img;
  void set(int x, int y, std::array<uint8_t, 3> c) {
    if (x < 0 || y < 0 || x >= img.width || y >= img.height) return;
    uint8_t* p = &img.pixels[(size_t(y) * size_t(img.width) + size_t(x)) * 3];
    p[0] = c[0], p[1] = c[1], p[2] = c[2];
  }
  void rect(int x0, int y0, int x1, int y1, std::array<uint8_t, 3> c) {
    for (int x = x0; x <= x1; ++x) set(x, y0, c), set(x, y1, c);
    for (int y = y0; y <= y1; ++y) set(x0, y, c), set(x1, y, c);
  }
  void line(int x0, int y0, int x1, int y1, std::array<uint8_t, 3> c) {
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
  // Text at scale 2 (10x14 pixels a character, 12 pixels apart).
  void text(int x, int y, const std::string& s, std::array<uint8_t, 3> c) {
    for (char ch : s) {
      if (const auto* g = glyph(ch))
        for (int row = 0; row < 7; ++row)
          for (int col = 0; col < 5; ++col)
            if ((*g)[size_t(row)] & (0x10 >> col))
              for (int k = 0; k < 4; ++k) set(x + 2 * col + k % 2, y + 2 * row + k / 2, c);
      x += 12;
    }
  }
};

std::string label(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (a >= 1e4 || a < 1e-3) return fmt::format("{:.2e}", v);
  return fmt::format("{:.4g}", v);
}

void put32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += char((v >> s) & 0xFF);
}

void chunk(std::string& out, const char* type, const std::string& data) {
  put32(out, uint32_t(data.size()));
  std::string body = std::string(type, 4) + data;
  out += body;
  put32(out, crc32(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t adler32(const uint8_t* data, size_t size, uint32_t adler) {
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  for (size_t i = 0; i < size; ++i) {
    a = (a + data[i]) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

std::string encode_png(const RgbImage& img) {
  require(img.width > 0 && img.height > 0 && img.pixels.size() == size_t(img.width) * size_t(img.height) * 3,
          "encode_png: the pixel buffer does not match the image size");
  std::string raw;  // scanlines, each with filter byte 0
  const size_t stride = size_t(img.width) * 3;
  for (int y = 0; y < img.height; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(&img.pixels[size_t(y) * stride]), stride);
  }
  std::string z = "\x78\x01";  // zlib header: deflate, 32K window, no preset dictionary
  for (size_t pos = 0; pos < raw.size() || pos == 0;) {
    const size_t len = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + len == raw.size();
    z += char(last ? 1 : 0);  // BFINAL, BTYPE 00 (stored)
    z += char(len & 0xFF), z += char(len >> 8);
    z += char(~len & 0xFF), z += char((~len >> 8) & 0xFF);
    z.append(raw, pos, len);
    pos += len;
    if (last) break;
  }
  put32(z, adler32(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
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

RgbImage render_line_charts(const std::vector<PlotSeries>& series, int width, int panel_height) {
  RgbImage img;
  img.width = width;
  img.height = std::max(1, int(series.size()) * panel_height);
  img.pixels.assign(size_t(img.width) * size_t(img.height) * 3, 255);
  Canvas c{img};
  const std::array<uint8_t, 3> ink = {40, 40, 40}, grid = {200, 200, 200}, blue = {31, 119, 180};
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const int top = int(i) * panel_height, left = 110, right = width - 20, y0 = top + 30, y1 = top + panel_height - 30;
    c.text(left, top + 8, s.title, ink);
    c.rect(left, y0, right, y1, grid);
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k)
      if (std::isfinite(s.x[k]) && std::isfinite(s.y[k]))
        xmin = std::min(xmin, s.x[k]), xmax = std::max(xmax, s.x[k]), ymin = std::min(ymin, s.y[k]),
        ymax = std::max(ymax, s.y[k]);
    if (!std::isfinite(xmin)) {
      c.text(left + 10, (y0 + y1) / 2 - 7, "NO DATA", grid);
      continue;
    }
    if (ymax - ymin < 1e-12) ymin -= 0.5, ymax += 0.5;
    if (xmax == xmin) xmax = xmin + 1;
    c.text(4, y0, label(ymax), ink);
    c.text(4, y1 - 14, label(ymin), ink);
    c.text(left, y1 + 6, label(xmin), ink);
    const std::string xr = label(xmax);
    c.text(right - 12 * int(xr.size()), y1 + 6, xr, ink);
    auto px = [&](double x) { return left + int(std::lround((x - xmin) / (xmax - xmin) * (right - left))); };
    auto py = [&](double y) { return y1 - int(std::lround((y - ymin) / (ymax - ymin) * (y1 - y0))); };
    bool have = false;
    int lx = 0, ly = 0;
    for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
      if (!std::isfinite(s.x[k]) || !std::isfinite(s.y[k])) {
        have = false;
        continue;
      }
      const int x = px(s.x[k]), y = py(s.y[k]);
      if (have) c.line(lx, ly, x, y, blue);
      else c.line(x, y, x, y, blue);
      lx = x, ly = y, have = true;
    }
  }
  return img;
}

std::vector<PlotSeries> training_series(const std::vector<Metrics>& rows) {
  const std::pair<const char*, const char*> panels[] = {
      {"reward/mean", "mean turn reward"},
      {"kernel/speedup", "mean speedup of correct turns"},
      {"kernel/correct", "correct turns (fraction)"},
      {"kernel/fast@1.2", "fast@1.2 (episodes)"},
      {"mismatch/mismatch_kl", "mismatch kl (rollout vs trainer)"},
      {"prs/drop_rate", "prs drop rate"},
  };
  std::vector<PlotSeries> out;
  for (const auto& [key, title] : panels) {
    PlotSeries s;
    s.title = title;
    for (const Metrics& m : rows) {
      const auto step = m.find("step"), v = m.find(key);
      if (step == m.end() || v == m.end()) continue;
      s.x.push_back(step->second);
      s.y.push_back(v->second);
    }
    out.push_back(std::move(s));
  }
  return out;
}

void plot_metrics(const std::vector<Metrics>& rows, const std::string& png_path) {
  write_file(png_path, encode_png(render_line_charts(training_series(rows))));
}

}  // namespace turnrl
