// Checked writes: a missing directory, a directory in the file's place and a file-size limit (the
// stand-in for a full disk, set in a forked child with SIGXFSZ ignored) each throw turnrl::Error
// naming the file and the system's reason; an atomic write that fails leaves the old content.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"

using namespace turnrl;

namespace {

std::string fresh_dir() {
  char dir[] = "/tmp/turnrl-checked-write-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  return dir;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `body` in a forked child whose files may not grow past `limit` bytes; the child exits 0
// when body throws turnrl::Error whose message contains `expected`, 1 when it does not throw, 2
// when the message differs (printed to stderr).
int with_file_size_limit(rlim_t limit, const std::string& expected, const std::function<void()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG instead of killing the process
    const rlimit r{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &r);
    try {
      body();
    } catch (const Error& e) {
      const bool ok = std::string(e.what()).find(expected) != std::string::npos;
      if (!ok) fprintf(stderr, "unexpected message: %s\n", e.what());
      ::_exit(ok ? 0 : 2);
    }
    ::_exit(1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("write_file writes and replaces a file's content", "[core][checked_write]") {
  const std::string dir = fresh_dir(), path = dir + "/report.json";
  write_file(path, "{\"a\": 1}\n");
  CHECK(read_all(path) == "{\"a\": 1}\n");
  write_file(path, "x");
  CHECK(read_all(path) == "x");
  write_file(path, "");
  CHECK(read_all(path).empty());
  CheckedFile log(path, CheckedFile::Mode::append);
  log.write("a\n");
  log.close();
  CheckedFile more(path, CheckedFile::Mode::append);  // appends after what is there
  more.write("b\n");
  more.close();
  CHECK(read_all(path) == "a\nb\n");
  CHECK_THROWS_WITH(more.write("c"), Catch::Contains("not open"));
  remove_tree(dir);
}

TEST_CASE("a missing directory or a directory in the file's place is an error naming the path", "[core][checked_write][edge]") {
  const std::string dir = fresh_dir();
  CHECK_THROWS_WITH(write_file(dir + "/missing/report.json", "{}"),
                    Catch::Contains("'" + dir + "/missing/report.json'") && Catch::Contains("No such file or directory"));
  CHECK_THROWS_WITH(write_file(dir, "{}"), Catch::Contains("'" + dir + "'") && Catch::Contains("Is a directory"));
  CHECK_THROWS_WITH(CheckedFile(dir + "/missing/metrics.jsonl", CheckedFile::Mode::append),
                    Catch::Contains("No such file or directory"));
  CHECK_THROWS_WITH(write_file_atomically(dir + "/missing/config.yaml", "a: 1"), Catch::Contains("No such file or directory"));
  remove_tree(dir);
}

TEST_CASE("a file-size limit (a full disk's stand-in) makes every writer throw with the system's reason", "[core][checked_write][edge]") {
  const std::string dir = fresh_dir();
  const std::string big(4096, 'x');
  CHECK(with_file_size_limit(1000, "File too large", [&] { write_file(dir + "/big", big); }) == 0);
  // Appends: the lines within the limit land, the one that crosses it throws (none is lost silently).
  CHECK(with_file_size_limit(1000, "'" + dir + "/metrics.jsonl': File too large", [&] {
          CheckedFile f(dir + "/metrics.jsonl", CheckedFile::Mode::append);
          for (int i = 0; i < 100; ++i) {
            f.write(std::string(99, 'm') + "\n");
            f.sync();
          }
        }) == 0);
  CHECK(read_all(dir + "/metrics.jsonl").size() == 1000);
  // An atomic replacement that fails keeps the old file whole and leaves no temporary behind.
  write_file(dir + "/config.yaml", "old: 1\n");
  CHECK(with_file_size_limit(1000, "File too large", [&] { write_file_atomically(dir + "/config.yaml", big); }) == 0);
  CHECK(read_all(dir + "/config.yaml") == "old: 1\n");
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"big", "config.yaml", "metrics.jsonl"});
  remove_tree(dir);
}
