// The PNG writer: checksums against known values, chunk layout, and the metric panels.
#include <catch2/catch.hpp>

#include <cstring>

#include "turnrl/trainer/plot.h"

using namespace turnrl;

namespace {
uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}
}  // namespace

TEST_CASE("crc32 and adler32 match their standard check values", "[trainer][plot]") {
  const char* digits = "123456789";
  CHECK(crc32(reinterpret_cast<const uint8_t*>(digits), 9) == 0xCBF43926u);
  const char* wiki = "Wikipedia";
  CHECK(adler32(reinterpret_cast<const uint8_t*>(wiki), 9) == 0x11E60398u);
}

TEST_CASE("encode_png writes signature, IHDR, stored-deflate IDAT and IEND with valid CRCs", "[trainer][plot]") {
  RgbImage img;
  img.width = 300;
  img.height = 250;  // > 65535 bytes of scanlines: several stored blocks
  img.pixels.assign(size_t(img.width * img.height * 3), 0);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = uint8_t(i * 7);
  const std::string png = encode_png(img);
  REQUIRE(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  size_t at = 8;
  std::vector<std::string> types;
  std::string idat;
  while (at < png.size()) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    types.push_back(type);
    const std::string body = png.substr(at + 4, 4 + len);
    CHECK(be32(png, at + 8 + len) == crc32(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
    if (type == "IHDR") {
      CHECK(be32(png, at + 8) == 300);
      CHECK(be32(png, at + 12) == 250);
    }
    if (type == "IDAT") idat = png.substr(at + 8, len);
    at += 12 + len;
  }
  CHECK(types == std::vector<std::string>{"IHDR", "IDAT", "IEND"});
  // Inflate the stored blocks by hand and compare with the filtered scanlines.
  REQUIRE(idat.size() > 6);
  CHECK((uint8_t(idat[0]) * 256 + uint8_t(idat[1])) % 31 == 0);  // zlib header check bits
  std::string raw;
  size_t p = 2;
  bool final_block = false;
  while (!final_block) {
    final_block = idat[p] & 1;
    const size_t len = uint8_t(idat[p + 1]) | size_t(uint8_t(idat[p + 2])) << 8;
    const size_t nlen = uint8_t(idat[p + 3]) | size_t(uint8_t(idat[p + 4])) << 8;
    CHECK(len == (~nlen & 0xFFFF));
    raw += idat.substr(p + 5, len);
    p += 5 + len;
  }
  CHECK(raw.size() == size_t(250 * (1 + 300 * 3)));
  CHECK(raw[0] == '\0');
  CHECK(std::memcmp(raw.data() + 1, img.pixels.data(), 900) == 0);
  CHECK(be32(idat, p) == adler32(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
}

TEST_CASE("training_series takes each panel's metric against step and draws something", "[trainer][plot]") {
  std::vector<Metrics> rows;
  for (int s = 1; s <= 5; ++s) rows.push_back({{"step", double(s)}, {"reward/mean", 0.1 * s}, {"prs/drop_rate", 0.5}});
  const auto series = training_series(rows);
  REQUIRE(series.size() == 6);
  CHECK(series[0].x == std::vector<double>{1, 2, 3, 4, 5});
  CHECK(series[1].x.empty());  // no speedup metric in these rows
  const RgbImage img = render_line_charts(series, 400, 120);
  CHECK(img.height == 720);
  size_t blue = 0;
  for (size_t i = 0; i < img.pixels.size(); i += 3) blue += img.pixels[i] == 31 && img.pixels[i + 2] == 180;
  CHECK(blue > 100);
}
