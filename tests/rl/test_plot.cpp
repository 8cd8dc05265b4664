// The plotter: tick positions and labels against hand-computed values, the PNG read back through
// zlib (chunk layout, CRCs, the inflated scanlines), and pixel checks on rendered charts.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "turnrl/core/error.h"
#include "turnrl/rl/plot.h"

using namespace turnrl;

namespace {

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}

struct DecodedPng {
  int width = 0, height = 0;
  std::vector<std::string> chunk_types;
  size_t idat_bytes = 0;
  std::string scanlines;  // inflated IDAT
};

// Walks the chunks (checking each CRC with zlib's crc32) and inflates the IDAT data.
DecodedPng decode_png(const std::string& png) {
  DecodedPng d;
  REQUIRE(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  std::string idat;
  for (size_t at = 8; at < png.size();) {
    const uint32_t len = be32(png, at);
    const std::string body = png.substr(at + 4, 4 + len);
    d.chunk_types.push_back(body.substr(0, 4));
    CHECK(be32(png, at + 8 + len) == ::crc32(0L, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size())));
    if (d.chunk_types.back() == "IHDR") {
      d.width = int(be32(png, at + 8));
      d.height = int(be32(png, at + 12));
      CHECK(png.substr(at + 16, 5) == std::string("\x08\x02\x00\x00\x00", 5));
    }
    if (d.chunk_types.back() == "IDAT") idat += png.substr(at + 8, len);
    at += 12 + len;
  }
  d.idat_bytes = idat.size();
  uLongf size = uLongf(d.height) * (uLongf(d.width) * 3 + 1);
  d.scanlines.assign(size, '\0');
  REQUIRE(uncompress(reinterpret_cast<Bytef*>(&d.scanlines[0]), &size, reinterpret_cast<const Bytef*>(idat.data()),
                     uLong(idat.size())) == Z_OK);
  d.scanlines.resize(size);
  return d;
}

size_t count_colour(const RgbImage& img, uint8_t r, uint8_t g, uint8_t b, int y_from = 0, int y_to = -1) {
  if (y_to < 0) y_to = img.height;
  size_t n = 0;
  for (int y = y_from; y < y_to; ++y)
    for (int x = 0; x < img.width; ++x) {
      const uint8_t* p = &img.pixels[(size_t(y) * size_t(img.width) + size_t(x)) * 3];
      n += p[0] == r && p[1] == g && p[2] == b;
    }
  return n;
}

PlotRun ramp_run(const std::string& label, int steps, double slope) {
  PlotRun run{label, {}};
  for (int s = 1; s <= steps; ++s)
    run.rows.push_back({{"step", double(s)}, {"critic/score/mean", slope * s}, {"kernel/correct", 0.5}});
  return run;
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace

TEST_CASE("nice_ticks picks 1-2-5 spacings that cover the range", "[trainer][plot]") {
  const std::vector<double> unit = nice_ticks(0, 1, 5);  // raw 0.2 -> 0.2
  REQUIRE(unit.size() == 6);
  for (size_t i = 0; i < unit.size(); ++i) CHECK(unit[i] == Approx(0.2 * double(i)).margin(1e-12));
  CHECK(nice_ticks(1, 20, 8, 1) == std::vector<double>{0, 5, 10, 15, 20});  // raw 2.375 -> 5
  const std::vector<double> t = nice_ticks(-0.013, 0.047, 5);                // raw 0.012 -> 0.02
  REQUIRE(t.size() == 5);
  CHECK(t[0] == Approx(-0.02));
  CHECK(t[1] == 0.0);
  CHECK(t[4] == Approx(0.06));
  CHECK(nice_ticks(1, 2, 8, 1) == std::vector<double>{1, 2});  // steps stay whole numbers
  CHECK_THROWS_AS(nice_ticks(1, 1), Error);
  CHECK_THROWS_AS(nice_ticks(0, NAN), Error);
}

TEST_CASE("tick_labels use the decimals the spacing needs", "[trainer][plot]") {
  CHECK(tick_labels({0, 0.2, 0.4}) == std::vector<std::string>{"0.0", "0.2", "0.4"});
  CHECK(tick_labels({0, 5, 10}) == std::vector<std::string>{"0", "5", "10"});
  CHECK(tick_labels({-0.02, 0, 0.02}) == std::vector<std::string>{"-0.02", "0.00", "0.02"});
  CHECK(tick_labels({0, 1e6, 2e6}) == std::vector<std::string>{"0", "1e+06", "2e+06"});
}

TEST_CASE("encode_png writes IHDR, a zlib-deflated IDAT and IEND that inflate to the pixels", "[trainer][plot]") {
  RgbImage img;
  img.width = 300;
  img.height = 250;
  img.pixels.assign(size_t(img.width * img.height * 3), 255);
  for (int x = 0; x < img.width; ++x) img.pixels[size_t(100 * img.width + x) * 3] = 7;  // one line
  const std::string png = encode_png(img);
  const DecodedPng d = decode_png(png);
  CHECK(d.chunk_types == std::vector<std::string>{"IHDR", "IDAT", "IEND"});
  CHECK(d.width == 300);
  CHECK(d.height == 250);
  REQUIRE(d.scanlines.size() == size_t(250 * (1 + 300 * 3)));
  for (int y = 0; y < img.height; ++y) {
    const size_t row = size_t(y) * (1 + 900);
    CHECK(d.scanlines[row] == '\0');
    CHECK(std::memcmp(d.scanlines.data() + row + 1, img.pixels.data() + size_t(y) * 900, 900) == 0);
  }
  CHECK(d.idat_bytes * 50 < d.scanlines.size());  // compressed, not stored
}

TEST_CASE("a chart has gridlines, axis ink and one colour per run with a legend", "[trainer][plot]") {
  const std::vector<PlotRun> runs = {ramp_run("trloo", 20, 0.05), ramp_run("grpo", 20, 0.03)};
  const RgbImage img = render_metric_panels(runs, PlotOptions().with_metrics({"critic/score/mean"}).with_width(800));
  CHECK(img.width == 800);
  CHECK(img.height == 34 + 300);                       // legend band + one panel
  CHECK(count_colour(img, 225, 225, 225) > 2000);       // gridlines
  CHECK(count_colour(img, 40, 40, 40) > 500);           // titles and tick labels
  CHECK(count_colour(img, 31, 119, 180, 34) > 300);     // run 1 (blue) inside the panel
  CHECK(count_colour(img, 255, 127, 14, 34) > 300);     // run 2 (orange)
  CHECK(count_colour(img, 255, 127, 14, 0, 34) > 30);   // and its legend entry
  const RgbImage one = render_metric_panels({runs[0]}, PlotOptions().with_metrics({"critic/score/mean"}));
  CHECK(one.height == 300);  // no legend for a single run
}

TEST_CASE("a single step is drawn as a visible marker", "[trainer][plot]") {
  const RgbImage img = render_metric_panels({ramp_run("one", 1, 1.0)}, PlotOptions().with_metrics({"critic/score/mean"}));
  CHECK(count_colour(img, 31, 119, 180) >= 36);  // a 6x6 marker
}

TEST_CASE("default panels are those present, in two columns beyond three panels", "[trainer][plot]") {
  PlotRun run = ramp_run("r", 5, 0.1);
  const RgbImage two = render_metric_panels({run}, PlotOptions().with_panel_height(200));
  CHECK(two.height == 2 * 200);  // critic/score/mean and kernel/correct, one column
  for (Metrics& m : run.rows) m["actor/entropy"] = 1, m["prs/drop_rate"] = 0;
  CHECK(render_metric_panels({run}, PlotOptions().with_panel_height(200)).height == 2 * 200);  // 4 panels, 2x2
}

TEST_CASE("a metric no run has, and files that are not metrics, are refused", "[trainer][plot]") {
  CHECK_THROWS_WITH(render_metric_panels({ramp_run("r", 3, 1)}, PlotOptions().with_metrics({"actor/nope"})),
                    Catch::Contains("'actor/nope' is in none of the runs"));
  PlotRun no_defaults{"r", {{{"step", 1}, {"mine", 2}}}};
  CHECK_THROWS_WITH(render_metric_panels({no_defaults}), Catch::Contains("mine"));
  const std::string no_step = temp_file("turnrl_plot_no_step.jsonl", "{\"a\": 1}\n{\"a\": 2}\n");
  CHECK_THROWS_WITH(read_plot_run(no_step, "x"), Catch::Contains("no line has a \"step\""));
  const std::string not_json = temp_file("turnrl_plot_not_json.txt", "hello world\n");
  CHECK_THROWS_WITH(read_plot_run(not_json, "x"), Catch::Contains(":1:"));
  CHECK_THROWS_WITH(read_plot_run("/nonexistent/metrics.jsonl", "x"), Catch::Contains("cannot read"));
  std::remove(no_step.c_str());
  std::remove(not_json.c_str());
}

TEST_CASE("plot_runs writes a small PNG of a 20-step run", "[trainer][plot]") {
  const std::string path = (std::filesystem::temp_directory_path() / "turnrl_plot_test.png").string();
  plot_runs({ramp_run("r", 20, 0.05)}, path);
  std::ifstream in(path, std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const DecodedPng d = decode_png(png);
  CHECK(d.width == 1200);
  CHECK(png.size() < 60000);  // uncompressed it would be ~2 MB
  std::remove(path.c_str());
}
