#pragma once
// A free TCP port on 127.0.0.1 for a test world's MASTER_PORT (tests and benchmarks).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace turnrl::testing {

// Binds port 0, reads back the port the kernel chose and closes it again: free unless another
// process takes it in between.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace turnrl::testing
