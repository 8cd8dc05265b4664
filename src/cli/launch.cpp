// `turnrl train --nproc N`: a local launcher in the manner of torchrun, for one host.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/error.h"

namespace {

// A loopback port nobody listens on now (the kernel's choice for port 0). Rank 0 binds it a moment
// later; the gap is the same one torchrun's standalone mode lives with.
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) turnrl::fail("turnrl train --nproc: socket() failed: {}", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    turnrl::fail("turnrl train --nproc: cannot find a free loopback port: {}", why);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// The ranks, for the signal handler: a SIGINT or SIGTERM to the launcher is passed on to every rank
// (each stops; checkpoints already written stay), then the launcher reports as usual.
volatile sig_atomic_t g_rank_count = 0;
pid_t g_rank_pids[1024];

void forward_signal(int sig) {
  for (sig_atomic_t i = 0; i < g_rank_count; ++i)
    if (g_rank_pids[i] > 0) ::kill(g_rank_pids[i], sig);
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("wait status {}", status);
}

}  // namespace

namespace turnrl::cli {

int launch_local_ranks(int nproc, const std::vector<std::string>& train_args) {
  const int port = free_loopback_port();
  std::vector<pid_t> pids(size_t(nproc), -1);
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
      turnrl::fail("turnrl train --nproc: fork() failed for rank {}: {}", rank, std::strerror(errno));
    }
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast stays off unless the user says otherwise
      std::vector<char*> argv;
      for (const std::string& a : train_args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      fmt::print(stderr, "turnrl: rank {}: exec of /proc/self/exe failed: {}\n", rank, std::strerror(errno));
      ::_exit(127);
    }
    pids[size_t(rank)] = pid;
    g_rank_pids[rank] = pid;
    g_rank_count = rank + 1;
  }
  struct sigaction forward {};
  forward.sa_handler = forward_signal;
  sigemptyset(&forward.sa_mask);
  ::sigaction(SIGINT, &forward, nullptr);
  ::sigaction(SIGTERM, &forward, nullptr);
  fmt::print(stderr, "turnrl: {} ranks on this host, rendezvous 127.0.0.1:{}\n", nproc, port);
  int result = 0, running = nproc;
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int rank = -1;
    for (int r = 0; r < nproc; ++r)
      if (pids[size_t(r)] == pid) rank = r;
    if (rank < 0) continue;
    pids[size_t(rank)] = -1;
    g_rank_pids[rank] = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && result == 0) {
      // The first failure decides; the others would wait for it until their collective timeout.
      fmt::print(stderr, "turnrl: rank {} ended with {}; stopping the other ranks\n", rank, exit_text(status));
      result = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
    }
  }
  return result;
}

}  // namespace turnrl::cli
