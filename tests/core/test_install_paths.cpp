// Where turnrl finds its own files: the override variables come first, then the running
// program's prefix; a missing file names the folders tried and the variable to set.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "turnrl/core/filesystem.h"
#include "turnrl/core/error.h"
#include "turnrl/core/install_paths.h"

using namespace turnrl;
namespace fs = std::filesystem;

namespace {

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const std::string& n, const std::string& value) : name(n) { ::setenv(n.c_str(), value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

std::string self_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  REQUIRE(n > 0);
  return fs::path(std::string(buf, size_t(n))).parent_path().string();
}

}  // namespace

TEST_CASE("an override variable's folder is searched first", "[core][install_paths]") {
  const fs::path dir = fs::temp_directory_path() / "turnrl_install_paths_test";
  turnrl::remove_tree(dir);
  fs::create_directories(dir / "configs");
  std::ofstream(dir / "configs" / "mine.yaml") << "trainer: {steps: 1}\n";
  ScopedEnv env("TURNRL_DATA_DIR", dir.string());
  CHECK(turnrl_search_dirs(TurnrlFiles::data).front() == dir.string());
  CHECK(find_turnrl_file(TurnrlFiles::data, "configs/mine.yaml") == (dir / "configs" / "mine.yaml").string());
  turnrl::remove_tree(dir);
}

TEST_CASE("helpers are looked for beside the running program, then in ../libexec/turnrl", "[core][install_paths]") {
  const std::vector<std::string> dirs = turnrl_search_dirs(TurnrlFiles::helpers);
  REQUIRE(dirs.size() >= 2);
  CHECK(dirs[0] == self_dir());
  CHECK(dirs[1] == self_dir() + "/../libexec/turnrl");
  // This test runs from the build tree's bin/, where the helper programs are built.
  CHECK(find_turnrl_file(TurnrlFiles::helpers, "turnrl_cpu_worker") == self_dir() + "/turnrl_cpu_worker");
  CHECK(turnrl_search_dirs(TurnrlFiles::headers).front() == self_dir() + "/../include");
  CHECK(turnrl_search_dirs(TurnrlFiles::data).front() == self_dir() + "/../share/turnrl");
}

TEST_CASE("a helper must be executable, and a missing file names the folders and the variable", "[core][install_paths]") {
  const fs::path dir = fs::temp_directory_path() / "turnrl_install_paths_helpers";
  turnrl::remove_tree(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "turnrl_fake_worker") << "#!/bin/sh\n";
  ScopedEnv env("TURNRL_WORKER_DIR", dir.string());
  CHECK_THROWS_WITH(find_turnrl_file(TurnrlFiles::helpers, "turnrl_fake_worker"),
                    Catch::Contains("'turnrl_fake_worker' not found") && Catch::Contains(dir.string()) &&
                        Catch::Contains("set TURNRL_WORKER_DIR"));
  ::chmod((dir / "turnrl_fake_worker").c_str(), 0755);
  CHECK(find_turnrl_file(TurnrlFiles::helpers, "turnrl_fake_worker") == (dir / "turnrl_fake_worker").string());
  CHECK_THROWS_WITH(find_turnrl_file(TurnrlFiles::headers, "turnrl/kernels/no_such.h"), Catch::Contains("TURNRL_INCLUDE_DIR"));
  turnrl::remove_tree(dir);
}
