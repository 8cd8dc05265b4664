#include <catch2/catch.hpp>

#include <unistd.h>

#include <csignal>

#include "candidates.h"
#include "turnrl/eval/sandbox.h"

using namespace turnrl;
using turnrl::test::request;

namespace {
struct Dir {
  std::string path = make_private_dir("turnrl-test");
  ~Dir() { remove_private_dir(path); }
};
CommandResult sh(const std::string& script, SandboxLimits limits = SandboxLimits{}.wall(5)) {
  Dir d;
  return run_sandboxed("/bin/sh", {"-c", script}, limits, d.path);
}
}  // namespace

TEST_CASE("sandbox: a command runs in its private directory with a restricted environment") {
  Dir d;
  CommandResult r = run_sandboxed("/bin/sh", {"-c", "pwd; env | sort"}, SandboxLimits{}, d.path);
  REQUIRE(r.status == SandboxStatus::ok);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::StartsWith(d.path + "\n"));
  CHECK_THAT(r.output, Catch::Contains("HOME=" + d.path));
  CHECK_THAT(r.output, !Catch::Contains("TURNRL_TEST_SECRET"));
}

TEST_CASE("sandbox: no inherited file descriptors beyond stdin/stdout/stderr") {
  const int leaked = ::dup(2);  // an fd without O_CLOEXEC in the parent
  CommandResult r = sh("ls /proc/self/fd | wc -l");
  ::close(leaked);
  REQUIRE(r.status == SandboxStatus::ok);
  // 0, 1, 2 and the fd ls itself opens for the directory.
  CHECK(std::stoi(r.output) <= 4);
}

TEST_CASE("sandbox: exit codes, wall-clock limit, output limit, signals") {
  CHECK(sh("exit 3").exit_code == 3);
  CommandResult slow = sh("sleep 30", SandboxLimits{}.wall(0.5));
  CHECK(slow.status == SandboxStatus::timeout);
  CommandResult flood = sh("yes", SandboxLimits{}.wall(5).output(1 << 16));
  CHECK(flood.status == SandboxStatus::output_limit);
  CHECK(flood.output.size() == size_t(1 << 16));
  CommandResult killed = sh("kill -SEGV $$");
  CHECK(killed.status == SandboxStatus::crashed);
  CHECK(killed.signal == SIGSEGV);
}

TEST_CASE("sandbox: CPU-time limit") {
  SandboxLimits l;
  l.wall(20).cpu(0);  // RLIMIT_CPU of 1 s
  l.startup_seconds = 0;
  CommandResult r = sh("while :; do :; done", l);
  CHECK(r.status == SandboxStatus::timeout);
}

TEST_CASE("sandbox: helper program lookup names the places it tried") {
  CHECK_THAT(find_helper_program("turnrl_cpu_worker"), Catch::EndsWith("/turnrl_cpu_worker"));
  CHECK_THROWS_WITH(find_helper_program("turnrl_no_such_helper"), Catch::Contains("TURNRL_WORKER_DIR"));
}

TEST_CASE("sandbox: broken candidates cost one result each, with the right error, and the pool keeps working") {
  CpuEvalOptions o = test::test_options();
  o.limits.wall(3).cpu(2);
  o.limits.address_space(int64_t(3) << 30);
  CpuEvaluator e(o);
  std::vector<EvalRequest> reqs = {
      request("relu_bias", "segfault", "broken"),      request("relu_bias", "honest"),
      request("relu_bias", "hang", "broken"),          request("relu_bias", "unbounded_alloc", "broken"),
      request("relu_bias", "print_100mb", "broken"),   request("relu_bias", "no_compile", "broken"),
      request("relu_bias", "runtime_error", "broken"), request("relu_bias", "honest"),
  };
  const auto res = e.evaluate(reqs);
  auto info = [&](size_t i) { return to_string(res[i].error) + std::string(": ") + res[i].message; };
  INFO(info(0));
  CHECK(res[0].error == EvalError::crash);
  CHECK_THAT(res[0].message, Catch::Contains("signal 11"));
  INFO(info(1));
  CHECK(res[1].correct);
  INFO(info(2));
  CHECK(res[2].error == EvalError::timeout);
  CHECK_THAT(res[2].message, Catch::Contains("limit"));
  INFO(info(3));
  CHECK(res[3].error == EvalError::memory);
  INFO(info(4));
  CHECK(res[4].error == EvalError::output_limit);
  INFO(info(5));
  CHECK(res[5].error == EvalError::compile);
  CHECK_THAT(res[5].message, Catch::Contains("error"));
  CHECK(res[5].stage == EvalStage::extracted);
  INFO(info(6));
  CHECK(res[6].error == EvalError::runtime);
  CHECK_THAT(res[6].message, Catch::Contains("returned 7"));
  INFO(info(7));
  CHECK(res[7].correct);
  CHECK(e.worker_starts() >= 4 + 1);  // each crash, hang, memory and output failure replaced a worker
}
