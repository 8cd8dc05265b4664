// Atomic checkpoint directories: complete or absent, keep-last-k, temporaries ignored.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "turnrl/core/error.h"
#include "turnrl/trainer/checkpoint.h"
#include "trainer/trainer_test_support.h"

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
