// TensorBoard event files: CRC-32C against published test vectors (RFC 3720), an Event's bytes
// against a hand-encoded message, and a written file read back record by record.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "turnrl/core/filesystem.h"
#include "turnrl/core/error.h"
#include "turnrl/rl/tensorboard.h"

using namespace turnrl;
namespace fs = std::filesystem;

namespace {
uint32_t crc_of(const std::string& s) { return crc32c(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
}  // namespace

TEST_CASE("crc32c matches the RFC 3720 and check-value test vectors", "[trainer][tensorboard]") {
  CHECK(crc_of("123456789") == 0xE3069283u);
  CHECK(crc_of(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(crc_of(std::string(32, '\xFF')) == 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) ascending += char(i), descending += char(31 - i);
  CHECK(crc_of(ascending) == 0x46DD794Eu);
  CHECK(crc_of(descending) == 0x113FDB5Cu);
  // TFRecord's mask: rotate right by 15, add 0xa282ead8.
  const uint32_t c = 0xE3069283u;
  CHECK(masked_crc32c(reinterpret_cast<const uint8_t*>("123456789"), 9) == ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST_CASE("scalar_event encodes wall_time, step and one Summary.Value as protobuf does", "[trainer][tensorboard]") {
  // Event{wall_time: 1.5 (field 1, fixed64), step: 3 (field 2, varint),
  //       summary (field 5) {value (field 1) {tag: "a" (field 1), simple_value: 2.0 (field 2, fixed32)}}}
  const std::string expected("\x09\x00\x00\x00\x00\x00\x00\xF8\x3F"
                             "\x10\x03"
                             "\x2A\x0A"
                             "\x0A\x08"
                             "\x0A\x01" "a"
                             "\x15\x00\x00\x00\x40",
                             23);
  CHECK(scalar_event(1.5, 3, {{"a", 2.0}, {"step", 3}}) == expected);
  const std::string version = file_version_event(0.0);
  CHECK(version.substr(9) == std::string("\x1A\x0D") + "brain.Event:2");
}

TEST_CASE("tfrecord frames data with its length and both masked CRCs", "[trainer][tensorboard]") {
  const std::string r = tfrecord("abc");
  REQUIRE(r.size() == 8 + 4 + 3 + 4);
  CHECK(r.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));
  CHECK(r.substr(12, 3) == "abc");
  uint32_t data_crc = 0;
  std::memcpy(&data_crc, r.data() + 15, 4);
  CHECK(data_crc == masked_crc32c(reinterpret_cast<const uint8_t*>("abc"), 3));
}

TEST_CASE("a TensorBoardWriter's file reads back: version first, then every metric per step", "[trainer][tensorboard]") {
  const fs::path dir = fs::temp_directory_path() / "turnrl_tensorboard_test";
  turnrl::remove_tree(dir);
  fs::create_directories(dir);
  std::string path;
  {
    TensorBoardWriter w(dir.string());
    path = w.path();
    w.write_scalars(1, {{"step", 1}, {"critic/score/mean", 0.25}, {"actor/entropy", 1.5}});
    w.write_scalars(2, {{"step", 2}, {"critic/score/mean", 0.5}, {"actor/entropy", 1.25}});
  }
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const std::vector<TensorBoardEvent> events = read_tensorboard_events(path);
  REQUIRE(events.size() == 3);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].wall_time > 1.6e9);
  CHECK(events[1].step == 1);
  CHECK(events[2].step == 2);
  CHECK(events[2].scalars == std::vector<std::pair<std::string, float>>{{"actor/entropy", 1.25f}, {"critic/score/mean", 0.5f}});

  // A flipped data byte and a torn last record are both reported, naming the record.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  std::string flipped = bytes;
  flipped[bytes.size() - 10] ^= 0x01;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << flipped;
  CHECK_THROWS_WITH(read_tensorboard_events(path), Catch::Contains("record 2") && Catch::Contains("data CRC mismatch"));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 3);
  CHECK_THROWS_WITH(read_tensorboard_events(path), Catch::Contains("truncated"));
  turnrl::remove_tree(dir);
}
