// The CUDA backend's compiles (src/kernels/cuda_compile.h) wherever the CUDA toolkit is, GPU or
// not: candidates compile in the sandbox (turnrl_nvrtc for the kernel form, nvcc for launchers)
// into the parent's object cache, once per source and architecture; failures keep the compiler's
// message; a refused launch shape compiles nothing; an #include of a host file fails without its
// contents reaching the log. The CUDA tests (label cuda) load and run these objects on a GPU.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kernels/cuda_candidates.h"
#include "kernels/cuda_compile.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/kernels/cpu_backend.h"  // object_hash
#include "turnrl/kernels/sandbox.h"

using namespace turnrl;
using namespace turnrl::eval_detail;
namespace fs = std::filesystem;

#ifdef TURNRL_TEST_NVRTC
namespace {

constexpr const char* kArch = "sm_90a";

std::string scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("turnrl-cuda-compile-" + name + "-" + std::to_string(::getpid()));
  turnrl::remove_tree(dir);
  return dir.string();
}

CudaCompiler compiler() {
  CudaCompiler c;
  c.nvrtc_program = find_helper_program("turnrl_nvrtc");
  c.nvcc = TURNRL_TEST_NVCC;
  c.seconds = 120;
  return c;
}

const std::string& source_of(const char* task, const char* kind) {
  const test::CudaCandidate* c = test::find_cuda_candidate(task, kind);
  REQUIRE(c != nullptr);
  static std::string held;
  held = c->source;
  return held;
}

}  // namespace

TEST_CASE("cuda compile: a kernel-form candidate compiles once per source and architecture into the parent's cache") {
  const std::string dir = scratch("kernel");
  auto cache = make_cuda_object_cache(dir);
  const std::string source = source_of("relu_bias", "honest");
  const CompiledCandidate first = compile_cuda_candidate(*cache, compiler(), source, kArch);
  INFO(first.log);
  REQUIRE(first.ok);
  CHECK_FALSE(first.cached);
  CHECK(first.seconds > 0);
  CHECK(fs::path(first.library_path).parent_path() == fs::path(cache->objects_dir()));
  CHECK(read_file(first.library_path).substr(0, 4) == std::string("\x7f" "ELF"));  // a cubin
  CHECK(object_hash(first.library_path) == first.object_hash);
  // The cache directory is the trainer's alone; objects are readable, not writable, by others.
  CHECK((fs::status(dir).permissions() & (fs::perms::group_all | fs::perms::others_all)) == fs::perms::none);
  CHECK((fs::status(cache->objects_dir()).permissions() & (fs::perms::group_write | fs::perms::others_write)) == fs::perms::none);

  const CompiledCandidate again = compile_cuda_candidate(*cache, compiler(), source, kArch);
  CHECK(again.cached);
  CHECK(again.library_path == first.library_path);
  CHECK(cache->compiles() == 1);
  const CompiledCandidate other_arch = compile_cuda_candidate(*cache, compiler(), source, "sm_80");
  CHECK(other_arch.ok);
  CHECK(other_arch.library_path != first.library_path);
  CHECK(cache->compiles() == 2);
  // A changed object is never handed out: it is compiled again.
  { std::ofstream(first.library_path, std::ios::app) << "tampered"; }
  const CompiledCandidate checked = compile_cuda_candidate(*cache, compiler(), source, kArch);
  CHECK(checked.ok);
  CHECK(object_hash(checked.library_path) == checked.object_hash);
  CHECK(cache->replaced() == 1);
  CHECK(cache->compiles() == 3);
  turnrl::remove_tree(dir);
}

TEST_CASE("cuda compile: errors keep NVRTC's message and are cached, a refused launch shape compiles nothing") {
  const std::string dir = scratch("errors");
  auto cache = make_cuda_object_cache(dir);
  const CompiledCandidate broken = compile_cuda_candidate(*cache, compiler(), source_of("softmax_rows", "compile"), kArch);
  CHECK_FALSE(broken.ok);
  CHECK(broken.log.find("__shfl_xor_synk") != std::string::npos);
  CHECK(broken.log.find(dir) == std::string::npos);
  CHECK(broken.log.find(kSandboxWorkDir) == std::string::npos);
  const CompiledCandidate again = compile_cuda_candidate(*cache, compiler(), source_of("softmax_rows", "compile"), kArch);
  CHECK(again.cached);
  CHECK(again.log == broken.log);
  CHECK(cache->compiles() == 1);
  const CompiledCandidate shape = compile_cuda_candidate(*cache, compiler(), source_of("swiglu", "launch_shape"), kArch);
  CHECK_FALSE(shape.ok);
  CHECK(shape.log.find("TURNRL_BLOCK") != std::string::npos);
  CHECK(cache->compiles() == 1);
  turnrl::remove_tree(dir);
}

TEST_CASE("cuda compile: an #include of a host file fails in the sandbox and its contents never reach the log") {
  const std::string dir = scratch("include");
  const std::string secret_dir = scratch("secret");
  fs::create_directories(secret_dir);
  const std::string secret = secret_dir + "/secret.h";
  { std::ofstream(secret) << "turnrl_secret_marker_4711 is not C++\n"; }
  auto cache = make_cuda_object_cache(dir);
  const std::string source = "#include \"" + secret + "\"\n" + source_of("relu_bias", "honest");
  const CompiledCandidate o = compile_cuda_candidate(*cache, compiler(), source, kArch);
  INFO(o.log);
  CHECK_FALSE(o.ok);
  CHECK(o.log.find("turnrl_secret_marker_4711") == std::string::npos);
  CHECK_FALSE(o.log.empty());
  turnrl::remove_tree(dir);
  turnrl::remove_tree(secret_dir);
}

TEST_CASE("cuda compile: a launcher-form candidate compiles with nvcc in the sandbox") {
  const std::string dir = scratch("launcher");
  auto cache = make_cuda_object_cache(dir);
  const CompiledCandidate o = compile_cuda_candidate(*cache, compiler(), source_of("relu_bias", "honest_launcher"), kArch);
  INFO(o.log);
  REQUIRE(o.ok);
  CHECK(read_file(o.library_path).substr(0, 4) == std::string("\x7f" "ELF"));  // a shared object
  CHECK(compile_cuda_candidate(*cache, compiler(), source_of("relu_bias", "honest_launcher"), kArch).cached);
  turnrl::remove_tree(dir);
}

TEST_CASE("cuda compile: compile servers give one process's result for many compiles, and errors as before") {
  const std::string dir = scratch("servers"), again_dir = scratch("servers-again");
  auto cache = make_cuda_object_cache(dir);
  CudaCompiler c = compiler();
  c.nvrtc_servers = make_nvrtc_servers(c);
  REQUIRE(c.nvrtc_servers);
  const std::string source = source_of("relu_bias", "honest");
  // Three different sources (a comment apart): three compiles, one process.
  for (int i = 0; i < 3; ++i) {
    const CompiledCandidate o = compile_cuda_candidate(*cache, c, source + "\n// variant " + std::to_string(i) + "\n", kArch);
    INFO(o.log);
    REQUIRE(o.ok);
    CHECK_FALSE(o.cached);
    CHECK(read_file(o.library_path).substr(0, 4) == "\x7f" "ELF");  // a cubin
  }
  CHECK(c.nvrtc_servers->processes_started() == 1);
  // The same source compiled again by the server (a fresh cache) is the same object, byte for byte.
  // (A one-shot compile's cubin differs in its line table only: it records candidate.cu's mtime.)
  auto again_cache = make_cuda_object_cache(again_dir);
  const std::string variant = source + "\n// variant 0\n";
  CHECK(read_file(compile_cuda_candidate(*again_cache, c, variant, kArch).library_path) ==
        read_file(compile_cuda_candidate(*cache, c, variant, kArch).library_path));

  const CompiledCandidate broken = compile_cuda_candidate(*cache, c, source_of("softmax_rows", "compile"), kArch);
  CHECK_FALSE(broken.ok);
  CHECK(broken.log.find("error") != std::string::npos);
  const CompiledCandidate host_file = compile_cuda_candidate(*cache, c, "#include \"/etc/hostname\"\n" + source, kArch);
  CHECK_FALSE(host_file.ok);
  CHECK(c.nvrtc_servers->processes_started() == 1);
  turnrl::remove_tree(dir);
  turnrl::remove_tree(again_dir);
}

TEST_CASE("cuda compile: a compile over its time limit costs that compile, and the next one gets a fresh server") {
  const std::string dir = scratch("server-limit");
  fs::create_directories(dir);
  const std::string source = source_of("relu_bias", "honest");
  SandboxLimits tight = compiler().limits;
  tight.wall_seconds = tight.cpu_seconds = 0.005;  // less than any compile
  NvrtcServers servers(find_helper_program("turnrl_nvrtc"), tight.visible(TURNRL_TEST_CUDA_LIBRARY_DIR));
  const CompileOutcome late = servers.compile("sm_90a", source, dir, 2000);
  CHECK_FALSE(late.ok);
  CHECK_THAT(late.log, Catch::Contains("NVRTC") && Catch::Contains("limit"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "candidate.obj"));
  const int started = servers.processes_started();
  CHECK(started >= 1);
  CHECK_FALSE(servers.compile("sm_90a", source, dir, 2000).ok);  // the same limit: again one result lost
  CHECK(servers.processes_started() == started + 1);              // by a new process, not the killed one
  turnrl::remove_tree(dir);
}

TEST_CASE("cuda compile: a compile server's reply frame round-trips and a malformed one is an error") {
  NvrtcResult r;
  r.ok = true;
  r.log = "\n  warning: leading whitespace and a newline\n";
  r.object = std::string("\x7f" "ELF\0\n\x01", 7);
  const NvrtcResult back = decode_nvrtc_result(encode_nvrtc_result(r));
  CHECK(back.ok);
  CHECK(back.log == r.log);
  CHECK(back.object == r.object);
  NvrtcResult failed;
  failed.log = "error: expected a ';'";
  const NvrtcResult failed_back = decode_nvrtc_result(encode_nvrtc_result(failed));
  CHECK_FALSE(failed_back.ok);
  CHECK(failed_back.log == failed.log);
  CHECK(failed_back.object.empty());
  for (const std::string bad : {std::string(""), std::string("1 5\nabc"), std::string("2 0\nx"), std::string("ok\n"),
                                std::string("1 0\n"), std::string("0 1x\n")})
    CHECK_THROWS_AS(decode_nvrtc_result(bad), Error);
}

#else
TEST_CASE("cuda compile: skipped without the CUDA toolkit") { WARN("SKIPPED: no CUDA toolkit (NVRTC) at build time"); }
#endif
