#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include "model/hf_fixtures.h"
#include "turnrl/core/error.h"
#include "turnrl/model/safetensors.h"

using namespace turnrl;
using test::ScratchFolder;

namespace {

// A safetensors file assembled byte by byte: the length, the header text as given, the data.
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               uint64_t declared_length = UINT64_MAX) {
  const uint64_t length = declared_length == UINT64_MAX ? header.size() : declared_length;
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(char((length >> (8 * i)) & 0xff));
  out << header << data;
}

std::string float_bytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

}  // namespace

TEST_CASE("safetensors: a file written by hand is read with offsets from 8 + N, odd header lengths included", "[model]") {
  ScratchFolder dir("by_hand");
  // 7-byte padding-free header text on purpose: the data starts at an unaligned 8 + N.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},)"
      R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  write_raw(dir.file("x.safetensors"), header, float_bytes({1.5f, -2.f, 3.25f, 7.f, 8.5f}));
  const SafetensorsFile file(dir.file("x.safetensors"));
  CHECK(file.names() == std::vector<std::string>{"a", "b"});
  CHECK(file.metadata().at("format") == "pt");
  const torch::Tensor a = file.view("a"), b = file.view("b");
  CHECK(a.scalar_type() == torch::kFloat);
  CHECK(a.sizes() == torch::IntArrayRef{3});
  CHECK(a[0].item<float>() == 1.5f);
  CHECK(a[2].item<float>() == 3.25f);
  CHECK(b[1].item<float>() == 8.5f);
  CHECK_THROWS_WITH(file.view("c"), Catch::Contains("no tensor 'c'"));
}

TEST_CASE("safetensors: write then read keeps names, shapes, dtypes, bytes and metadata", "[model]") {
  ScratchFolder dir("round_trip");
  torch::manual_seed(0);
  const NamedTensors tensors = {{"w.f32", torch::randn({3, 5})},
                                {"w.bf16", torch::randn({4}).to(torch::kBFloat16)},
                                {"w.f16", torch::randn({2, 2, 2}).to(torch::kHalf)},
                                {"empty", torch::zeros({0, 3})}};
  write_safetensors(dir.file("t.safetensors"), tensors, {{"format", "pt"}, {"note", "x"}});
  // The header is padded to a multiple of 8 so every tensor's data is aligned.
  std::ifstream in(dir.file("t.safetensors"), std::ios::binary);
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  CHECK(length[0] % 8 == 0);

  const SafetensorsFile file(dir.file("t.safetensors"));
  CHECK(file.metadata().at("note") == "x");
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor read = file.view(name);
    CHECK(read.scalar_type() == tensor.scalar_type());
    CHECK(read.sizes() == tensor.sizes());
    CHECK(torch::equal(read, tensor));
  }
  CHECK_THROWS_WITH(write_safetensors(dir.file("bad.safetensors"), {{"i", torch::zeros({2}, torch::kLong)}}),
                    Catch::Contains("Long") && Catch::Contains("BF16"));
}

TEST_CASE("safetensors: checkpoint folders, single and sharded with an index", "[model]") {
  ScratchFolder dir("shards");
  torch::manual_seed(1);
  NamedTensors tensors;
  for (int i = 0; i < 5; ++i) tensors.emplace_back("layer." + std::to_string(i), torch::randn({16}));  // 64 bytes each
  CHECK(write_safetensors_checkpoint(dir.path, tensors) == std::vector<std::string>{"model.safetensors"});
  const auto written =
      write_safetensors_checkpoint(dir.path, tensors, SafetensorsCheckpointOptions().max_shard_bytes(150));
  // 150 bytes hold two tensors: 2 + 2 + 1, and the single file of the first save is gone.
  CHECK(written == std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                            "model-00003-of-00003.safetensors", "model.safetensors.index.json"});
  CHECK_FALSE(std::filesystem::exists(dir.file("model.safetensors")));
  const nlohmann::json index = nlohmann::json::parse(test::read_text(dir.file("model.safetensors.index.json")));
  CHECK(index["metadata"]["total_size"] == 5 * 64);
  CHECK(index["weight_map"]["layer.4"] == "model-00003-of-00003.safetensors");
  const SafetensorsCheckpoint checkpoint(dir.path);
  CHECK(checkpoint.names().size() == 5);
  for (const auto& [name, tensor] : tensors) CHECK(torch::equal(checkpoint.view(name), tensor));
  CHECK(SafetensorsFile(dir.file("model-00002-of-00003.safetensors")).metadata().at("format") == "pt");

  // An index naming a tensor its shard does not hold.
  nlohmann::json broken = index;
  broken["weight_map"]["layer.0"] = "model-00003-of-00003.safetensors";
  test::write_text(dir.file("model.safetensors.index.json"), broken.dump());
  CHECK_THROWS_WITH(SafetensorsCheckpoint(dir.path), Catch::Contains("'layer.0'") && Catch::Contains("does not hold it"));
  ScratchFolder empty("empty_checkpoint");
  CHECK_THROWS_WITH(SafetensorsCheckpoint(empty.path), Catch::Contains("neither model.safetensors"));
}

TEST_CASE("safetensors: malformed files are errors naming the file and the tensor", "[model]") {
  ScratchFolder dir("bad");
  const std::string path = dir.file("bad.safetensors");
  const std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data = float_bytes({1.f, 2.f});

  SECTION("fewer than 8 bytes") {
    std::ofstream(path, std::ios::binary) << "abc";
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("truncated: 3 bytes"));
  }
  SECTION("a header length beyond the file") {
    write_raw(path, good_header, data, 1000);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("header length 1000 exceeds"));
  }
  SECTION("a huge header length") {
    write_raw(path, good_header, data, uint64_t(1) << 62);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("header length"));
  }
  SECTION("a truncated data section") {
    write_raw(path, good_header, data.substr(0, 6));
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("tensor 'a'") && Catch::Contains("out of range"));
  }
  SECTION("header text that is not JSON") {
    write_raw(path, R"({"a":{"dtype":)", data);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("not valid JSON"));
  }
  SECTION("a header that is not an object") {
    write_raw(path, "[1, 2]", data);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("JSON object"));
  }
  SECTION("a size that does not match shape x dtype") {
    write_raw(path, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("tensor 'a' spans 8 bytes") && Catch::Contains("needs 12"));
  }
  SECTION("overlapping tensors") {
    write_raw(path,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              data);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("'a'") && Catch::Contains("'b'") && Catch::Contains("overlap"));
  }
  SECTION("reversed offsets") {
    write_raw(path, R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("out of range"));
  }
  SECTION("an unsupported dtype") {
    write_raw(path, R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", data);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("tensor 'a' has dtype 'I64'") && Catch::Contains("BF16, F16, F32"));
  }
  SECTION("a negative dimension") {
    write_raw(path, R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("non-negative integers"));
  }
  SECTION("a missing field") {
    write_raw(path, R"({"a":{"dtype":"F32","shape":[2]}})", data);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("data_offsets"));
  }
  SECTION("metadata that is not strings") {
    write_raw(path, R"({"__metadata__":{"n":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data);
    CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("__metadata__ 'n'"));
  }
  SECTION("a missing file") {
    CHECK_THROWS_WITH(SafetensorsFile(dir.file("none.safetensors")), Catch::Contains("cannot open"));
  }
}
