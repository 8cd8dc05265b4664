#pragma once
// Test and benchmark support for the remote evaluator: a private redis-server on a free loopback
// port (or the server named by $TURNRL_TEST_REDIS_URL, as .ci/run provides), and child processes
// (`turnrl eval-worker`) with their output in a log file.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "turnrl/kernels/redis_connection.h"
#include "turnrl/kernels/sandbox.h"

extern char** environ;

namespace turnrl::test {

inline std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  for (const char* dir : {"/usr/bin", "/usr/sbin", "/usr/local/bin"})
    if (::access((std::string(dir) + "/" + name).c_str(), X_OK) == 0) return std::string(dir) + "/" + name;
  return "";
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A child process started with posix_spawn; stdout and stderr go to `log`.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log) : log_(log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~ChildProcess() { stop(SIGKILL); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  bool alive() {
    if (pid_ <= 0) return false;
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      pid_ = -1;
      return false;
    }
    return true;
  }
  // Sends `sig` and waits up to `seconds` for the exit (then SIGKILL); returns the wait status.
  int stop(int sig = SIGTERM, double seconds = 10) {
    if (pid_ <= 0) return exit_status_;
    ::kill(pid_, sig);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (alive() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, &exit_status_, 0);
      pid_ = -1;
    }
    return exit_status_;
  }
  std::string output() const { return read_text(log_); }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
  std::string log_;
};

// A Redis server for one test: $TURNRL_TEST_REDIS_URL when set, else a private redis-server on a
// free loopback port, no persistence, stopped (and its directory removed) with this object.
// available() is false, with the reason in skip_reason(), when neither exists.
class LocalRedis {
 public:
  // allow_external = false: always a private server (benchmarks want one nobody else loads).
  explicit LocalRedis(bool allow_external = true) {
    if (const char* url = std::getenv("TURNRL_TEST_REDIS_URL"); allow_external && url && *url) {
      url_ = url;
      return;
    }
    server_ = find_program("redis-server");
    if (server_.empty()) {
      skip_reason_ = "redis-server is not installed (apt install redis-server) and TURNRL_TEST_REDIS_URL is unset";
      return;
    }
    dir_ = make_private_dir("turnrl-test-redis");
    for (int attempt = 0; attempt < 3 && url_.empty(); ++attempt) start(free_port());
    if (url_.empty()) skip_reason_ = "redis-server did not start: " + read_text(dir_ + "/redis.log");
  }
  ~LocalRedis() {
    if (!process_ && available()) forget_streams();  // a shared server: leave nothing behind
    process_.reset();
    if (!dir_.empty()) remove_private_dir(dir_);
  }

  bool available() const { return !url_.empty(); }
  // True for a server of this object's own (not $TURNRL_TEST_REDIS_URL): it may be reconfigured,
  // flushed and restarted.
  bool is_private() const { return process_ != nullptr; }
  // A private server only: stops redis-server (SIGKILL) and starts a fresh one on the same port,
  // as a restart without persistence does: every stream, group and key is gone. False if it fails.
  bool restart() {
    if (!process_) return false;
    process_.reset();
    const int port = std::stoi(url_.substr(url_.rfind(':') + 1));
    url_.clear();
    for (int attempt = 0; attempt < 50 && url_.empty(); ++attempt) {  // the port may linger briefly
      start(port);
      if (url_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return !url_.empty();
  }
  const std::string& url() const { return url_; }
  const std::string& skip_reason() const { return skip_reason_; }
  // A stream name unique to this run; on a shared server its keys are deleted with this object.
  std::string stream(const std::string& what) {
    streams_.push_back(fmt::format("turnrl-test:{}:{}-{:06x}", what, getpid(), std::random_device()() & 0xffffff));
    return streams_.back();
  }
  // A directory for logs and configs, removed with the server.
  std::string scratch() {
    if (dir_.empty()) dir_ = make_private_dir("turnrl-test-redis");
    return dir_;
  }

 private:
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    ::close(fd);
    return port ? port : 20000 + int(std::random_device()() % 20000);
  }

  // Starts redis-server on `port` and waits up to 5 s for PONG; sets url_ on success.
  void start(int port) {
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{server_, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", dir_, "--protected-mode", "yes"},
        dir_ + "/redis.log");
    const std::string url = fmt::format("redis://127.0.0.1:{}", port);
    for (int i = 0; i < 250 && process_->alive(); ++i) {
      try {
        RedisConnection c(url, 1);
        if (c.command({"PING"}).str == "PONG") {
          url_ = url;
          return;
        }
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    process_.reset();
  }

  void forget_streams() {
    try {
      RedisConnection c(url_, 1);
      for (const auto& s : streams_) {
        std::string cursor = "0";
        do {
          const RedisReply r = c.command({"SCAN", cursor, "MATCH", s + "*", "COUNT", "1000"});
          cursor = r.elements.at(0).str;
          for (const auto& key : r.elements.at(1).elements) c.command({"DEL", key.str});
        } while (cursor != "0");
      }
    } catch (const std::exception&) {  // best effort: the keys also expire or go with the server
    }
  }

  std::string url_, skip_reason_, dir_, server_;
  std::vector<std::string> streams_;
  std::unique_ptr<ChildProcess> process_;
};

// The `turnrl` program of this build tree.
inline std::string turnrl_program() { return std::string(TURNRL_BUILD_BIN_DIR) + "/turnrl"; }

}  // namespace turnrl::test
