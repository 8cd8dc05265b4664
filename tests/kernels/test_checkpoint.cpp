// Atomic checkpoint directories: complete or absent, keep-last-k, temporaries ignored.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "turnrl/core/error.h"
#include "turnrl/rl/checkpoint.h"
#include "kernels/trainer_test_support.h"

using namespace turnrl;
namespace fs = std::filesystem;

namespace {
void write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
}
}  // namespace

TEST_CASE("checkpoints appear complete under step_N and only the newest k stay", "[trainer][checkpoint]") {
  const std::string root = test::fresh_dir("ckpt") + "/checkpoints";
  for (int64_t step : {1, 2, 3, 4}) {
    const std::string path = write_checkpoint(root, step, [&](const std::string& dir) { write_file(dir, "a.txt", std::to_string(step)); }, 2);
    CHECK(fs::path(path).filename() == checkpoint_name(step));
  }
  const auto all = list_checkpoints(root);
  REQUIRE(all.size() == 2);
  CHECK(all[0].step == 3);
  CHECK(all[1].step == 4);
  CHECK(latest_checkpoint(root)->step == 4);
  std::ifstream in(all[1].path + "/a.txt");
  std::string text;
  in >> text;
  CHECK(text == "4");
  // Rewriting a step replaces it.
  write_checkpoint(root, 4, [&](const std::string& dir) { write_file(dir, "a.txt", "again"); }, 2);
  std::ifstream again(latest_checkpoint(root)->path + "/a.txt");
  again >> text;
  CHECK(text == "again");
}

TEST_CASE("a writer that fails or dies leaves no step directory behind", "[trainer][checkpoint]") {
  const std::string root = test::fresh_dir("ckpt-fail") + "/checkpoints";
  write_checkpoint(root, 1, [&](const std::string& dir) { write_file(dir, "a.txt", "1"); }, 3);
  CHECK_THROWS_WITH(write_checkpoint(root, 2,
                                     [&](const std::string& dir) {
                                       write_file(dir, "a.txt", "half");
                                       throw Error("disk full");
                                     },
                                     3),
                    Catch::Contains("disk full"));
  CHECK(list_checkpoints(root).size() == 1);
  // What a killed writer leaves: a temporary directory. It is never listed, and cleanup removes it.
  fs::create_directories(root + "/.tmp-step_00000002-999");
  write_file(root + "/.tmp-step_00000002-999", "policy.pt", "torn");
  fs::create_directories(root + "/step_junk");
  CHECK(latest_checkpoint(root)->step == 1);
  CHECK(remove_incomplete_checkpoints(root) == 1);
  CHECK_FALSE(fs::exists(root + "/.tmp-step_00000002-999"));
  CHECK(list_checkpoints(test::fresh_dir("empty") + "/none").empty());
}

TEST_CASE("resuming falls back from checkpoints that do not load to the newest one that does", "[trainer][checkpoint][resume]") {
  const std::string root = test::fresh_dir("ckpt-fallback") + "/checkpoints";
  std::vector<SkippedCheckpoint> skipped;
  auto never = [](const std::string&) { FAIL("no checkpoint to load"); };
  CHECK_FALSE(load_newest_valid_checkpoint(root, never, &skipped).has_value());  // no root at all
  for (int64_t step : {1, 2, 3})
    write_checkpoint(root, step, [&](const std::string& dir) { write_file(dir, "a.txt", std::to_string(step)); }, 5);
  std::vector<std::string> tried;
  auto load = [&](const std::string& dir) {
    tried.push_back(fs::path(dir).filename().string());
    if (dir.find(checkpoint_name(3)) != std::string::npos) fail("policy.pt: truncated archive\nframe #0: c10::Error");
  };
  const auto loaded = load_newest_valid_checkpoint(root, load, &skipped);
  REQUIRE(loaded.has_value());
  CHECK(loaded->step == 2);
  CHECK(tried == std::vector<std::string>{checkpoint_name(3), checkpoint_name(2)});  // newest first, stop at a good one
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].entry.step == 3);
  CHECK(skipped[0].reason == "policy.pt: truncated archive");  // the first line, no stack trace
  // None loads: an error naming every checkpoint and its reason.
  auto broken = [](const std::string& dir) { fail("bad {}", fs::path(dir).filename().string()); };
  CHECK_THROWS_WITH(load_newest_valid_checkpoint(root, broken, &skipped),
                    Catch::Contains("none of the 3 checkpoints") && Catch::Contains("bad step_00000001") &&
                        Catch::Contains("bad step_00000003"));
}

TEST_CASE("a failed file save inside a checkpoint is a turnrl::Error naming the file, and the previous one stays", "[trainer][checkpoint][edge]") {
  const std::string root = test::fresh_dir("ckpt-failed-save") + "/checkpoints";
  const std::string scratch = test::fresh_dir("ckpt-save-file");
  // The bytes written to the path handed to `save` reach the file.
  const std::string bytes(200000, 'w');  // more than a pipe holds: the copy runs alongside
  save_checkpoint_file(scratch + "/policy.pt", [&](const std::string& path) { std::ofstream(path, std::ios::binary) << bytes; });
  std::ifstream saved(scratch + "/policy.pt", std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(saved), {}) == bytes);
  CHECK_THROWS_WITH(save_checkpoint_file(scratch + "/policy.pt",
                                         [](const std::string&) { throw std::runtime_error("serializer failed\nframe #0"); }),
                    Catch::Equals("checkpoint: cannot write '" + scratch + "/policy.pt': serializer failed"));
  CHECK_THROWS_WITH(save_checkpoint_file(scratch + "/missing/policy.pt", [](const std::string& path) { std::ofstream(path) << "x"; }),
                    Catch::Contains("missing/policy.pt'") && Catch::Contains("No such file or directory"));
  write_checkpoint(root, 1, [&](const std::string& dir) { write_file(dir, "policy.pt", "good"); }, 3);
  for (int64_t step : {1, 2}) {  // a failed rewrite of the same step, and a failed newer step
    CHECK_THROWS_WITH(write_checkpoint(root, step,
                                       [&](const std::string& dir) {
                                         save_checkpoint_file(dir + "/policy.pt", [](const std::string&) {
                                           throw std::runtime_error("disk full");
                                         });
                                       },
                                       3),
                      Catch::Contains("policy.pt': disk full"));
  }
  const auto all = list_checkpoints(root);
  REQUIRE(all.size() == 1);
  CHECK(all[0].step == 1);
  std::ifstream in(all[0].path + "/policy.pt");
  std::string text;
  in >> text;
  CHECK(text == "good");
  CHECK(remove_incomplete_checkpoints(root) == 0);  // no temporary directory was left behind
}
