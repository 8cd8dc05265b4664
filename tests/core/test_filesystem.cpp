// read_file: every byte back as written (NUL, bytes that are not UTF-8, more than one read's
// buffer), and an Error naming the path, the file's role and the reason for a missing file or a
// directory. remove_tree: a tree goes, a missing path is not an error.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"

using namespace turnrl;

namespace {

std::string fresh_dir() {
  char dir[] = "/tmp/turnrl-filesystem-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  return dir;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

}  // namespace

TEST_CASE("read_file returns every byte of the file as written") {
  const std::string dir = fresh_dir();
  SECTION("an empty file") {
    write_bytes(dir + "/empty", "");
    CHECK(read_file(dir + "/empty").empty());
  }
  SECTION("NUL and bytes that are not UTF-8") {
    const std::string bytes("a\0b\xff\xfe\xed\xa0\x80\n\r\n", 10);
    write_bytes(dir + "/binary", bytes);
    CHECK(read_file(dir + "/binary") == bytes);
  }
  SECTION("more than one read's worth (the buffer is 64 KiB)") {
    std::string bytes;
    for (size_t i = 0; i < (1u << 16) * 3 + 17; ++i) bytes += char((i * 131 + i / 251) & 0xFF);
    write_bytes(dir + "/large", bytes);
    const std::string back = read_file(dir + "/large");
    CHECK(back.size() == bytes.size());
    CHECK(back == bytes);
  }
  remove_tree(dir);
}

TEST_CASE("read_file names the path, the file's role and the reason when it cannot read") {
  const std::string dir = fresh_dir();
  CHECK_THROWS_AS(read_file(dir + "/missing.yaml"), Error);
  CHECK_THROWS_WITH(read_file(dir + "/missing.yaml", "the config file"),
                    Catch::Contains(dir + "/missing.yaml: cannot open the config file: No such file or directory"));
  CHECK_THROWS_WITH(read_file(dir), Catch::Contains(dir + ": cannot read the file: it is a directory"));
  if (::geteuid() != 0) {  // root reads anything
    write_bytes(dir + "/secret", "x");
    REQUIRE(::chmod((dir + "/secret").c_str(), 0) == 0);
    CHECK_THROWS_WITH(read_file(dir + "/secret"), Catch::Contains("secret: cannot open the file: Permission denied"));
  }
  remove_tree(dir);
}

TEST_CASE("remove_tree removes a tree and accepts a missing path") {
  const std::string dir = fresh_dir(), outside = fresh_dir();
  write_bytes(outside + "/target", "kept");
  REQUIRE(::mkdir((dir + "/a").c_str(), 0700) == 0);
  write_bytes(dir + "/a/f", "x");
  REQUIRE(::symlink((outside + "/target").c_str(), (dir + "/a/link").c_str()) == 0);
  std::string error;
  CHECK(remove_tree(dir, &error));
  CHECK(error.empty());
  CHECK(::access(dir.c_str(), F_OK) != 0);
  CHECK(read_file(outside + "/target") == "kept");  // the link went, not what it points at
  CHECK(remove_tree(dir + "/never-there", &error));
  remove_tree(outside);
}
