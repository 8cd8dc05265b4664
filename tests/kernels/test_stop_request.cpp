// Stopping on SIGINT / SIGTERM: the trainer finishes its step, checkpoints (checkpoint.on_stop)
// and returns; a real `turnrl train` child exits 143 / 130 saying where the checkpoint is, also when
// the signal comes twice at once (timeout(1)); a second signal a second later ends it at once.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "turnrl/rl/checkpoint.h"
#include "turnrl/rl/metrics.h"
#include "turnrl/rl/stop_request.h"
#include "turnrl/kernels/kernel_recipe.h"
#include "kernels/trainer_test_support.h"

extern char** environ;

using namespace turnrl;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t metrics_lines(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

// `turnrl train` on a small run with the real CPU evaluator (one task, two one-turn episodes a
// step), stdout and stderr into run_dir/train.log. Returns the child's pid.
pid_t start_train(const std::string& run_dir) {
  const std::string log = run_dir + ".log";
  std::vector<std::string> args = {std::string(TURNRL_BUILD_BIN_DIR) + "/turnrl", "train", "",
                                   "--set", "run.dir=" + run_dir, "--set", "run.progress=false",
                                   "--set", "trainer.steps=100000", "--set", "trainer.tasks_per_step=1",
                                   "--set", "trainer.samples_per_task=2", "--set", "env.max_turns=1",
                                   "--set", "env.timing_trials=2", "--set", "env.correctness_trials=1",
                                   "--set", "model.d_model=32", "--set", "model.layers=1", "--set", "model.heads=2",
                                   "--set", "evaluator.workers=1", "--set", "evaluator.warmup=0",
                                   "--set", "tasks.include=[relu_bias]", "--set", "checkpoint.every=100000"};
  args[2] = run_dir + ".yaml";
  std::ofstream(args[2]) << "env: {action: plan}\n";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Waits up to `seconds` for the child; returns its wait status, or -1 (after SIGKILL) on a hang.
int wait_exit(pid_t pid, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < until) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

void wait_for_first_step(pid_t pid, const std::string& run_dir) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (metrics_lines(run_dir) < 1) {
    int status = 0;
    INFO(read_text(run_dir + ".log"));
    REQUIRE(::waitpid(pid, &status, WNOHANG) == 0);  // still running
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

TEST_CASE("a recorded stop ends training after the current step with a checkpoint, unless on_stop is off", "[trainer][stop]") {
  for (const bool on_stop : {true, false}) {
    TrainConfig c = test::tiny_config(test::fresh_dir(on_stop ? "stop-on" : "stop-off"), 100);
    c.checkpoint.every = 0;  // only the final one: any checkpoint here comes from the stop
    c.checkpoint.on_stop = on_stop;
    KernelTrainer trainer(c, std::make_shared<test::PlanRuleEvaluator>());
    request_stop(SIGTERM);
    trainer.train();
    CHECK(stop_signal() == SIGTERM);
    CHECK(agreed_stop_signal(nullptr) == SIGTERM);
    request_stop(0);
    CHECK(trainer.step() == 1);
    CHECK(read_metrics_jsonl(c.run.dir + "/metrics.jsonl").size() == 1);
    const auto latest = latest_checkpoint(c.run.dir + "/checkpoints");
    CHECK(latest.has_value() == on_stop);
    if (latest) CHECK(latest->step == 1);
  }
}

namespace {

// A `turnrl train` child sent `signals` (the second 50 ms after the first, when there are two) once
// its first step is done: it must finish its step, checkpoint it and exit 128 + the signal.
// Returns its log.
std::string stop_and_check_checkpoint(const std::string& run_dir, const std::vector<int>& signals) {
  const pid_t pid = start_train(run_dir);
  wait_for_first_step(pid, run_dir);
  for (size_t i = 0; i < signals.size(); ++i) {
    if (i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(pid, signals[i]);
  }
  const int status = wait_exit(pid, 180);
  const std::string log = read_text(run_dir + ".log");
  INFO(log);
  REQUIRE(status != -1);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + signals.front());
  const auto latest = latest_checkpoint(run_dir + "/checkpoints");
  REQUIRE(latest.has_value());
  CHECK(latest->step == int64_t(metrics_lines(run_dir)));  // the last finished step
  CHECK_THAT(log, Catch::Contains(fmt::format("stopped by {} after step {}", strsignal(signals.front()), latest->step)) &&
                      Catch::Contains("checkpoint in " + latest->path));
  return log;
}

}  // namespace

TEST_CASE("turnrl train: SIGTERM stops after the step with a checkpoint and exit 143, and two SIGINTs at once with 130", "[trainer][stop][cli]") {
  const std::string dir = test::fresh_dir("sigterm");
  stop_and_check_checkpoint(dir + "/run", {SIGTERM});
  // Two SIGINTs 50 ms apart (the first handled before the second comes), as timeout(1) and
  // process-group signals deliver them: one request, so the run still finishes its step and
  // checkpoints.
  CHECK_THAT(stop_and_check_checkpoint(dir + "/run2", {SIGINT, SIGINT}),
             Catch::Contains("taken as the same request") && !Catch::Contains("second stop signal"));
}

namespace {

// In a child: install_stop_handlers, raise `signal`, wait `gap_ms`, raise it again, then exit 0
// with stop_signal() recorded (exit 1 if it was not). Returns the child's wait status.
int raise_twice_in_child(int signal, int gap_ms) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    install_stop_handlers();
    ::raise(signal);
    const timespec gap{gap_ms / 1000, long(gap_ms % 1000) * 1000000};
    ::nanosleep(&gap, nullptr);
    ::raise(signal);
    ::_exit(stop_signal() == signal ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("a second stop signal exits at once, a repeat within a second of the first is the same request", "[trainer][stop]") {
  const int at_once = raise_twice_in_child(SIGINT, 0);
  REQUIRE(WIFEXITED(at_once));
  CHECK(WEXITSTATUS(at_once) == 0);  // still running after both: it would finish its step
  const int later = raise_twice_in_child(SIGTERM, int(kRepeatedStopWindowNs / 1000000) + 200);
  REQUIRE(WIFEXITED(later));
  CHECK(WEXITSTATUS(later) == 128 + SIGTERM);  // "now"
}
