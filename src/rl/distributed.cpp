#include "turnrl/rl/distributed.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string_view>
#include <thread>

#include <ATen/ATen.h>

#include "turnrl/core/error.h"
#ifdef TURNRL_WITH_NCCL
#include "nccl_communicator.h"
#endif

namespace turnrl {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// The environment

// What errors call each field of a DistributedEnv: the torchrun variables when it came from the
// environment, the struct's fields when a caller built it.
struct EnvNames {
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* master_addr;
  const char* master_port;
};
constexpr EnvNames kVariableNames{"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
constexpr EnvNames kFieldNames{"DistributedEnv.rank", "DistributedEnv.world_size", "DistributedEnv.local_rank",
                               "DistributedEnv.master_addr", "DistributedEnv.master_port"};

void validate(const DistributedEnv& env, const EnvNames& n) {
  if (env.world_size < 1) fail("{}={}: allowed: an integer >= 1", n.world_size, env.world_size);
  if (env.rank < 0 || env.rank >= env.world_size)
    fail("{}={}: allowed: an integer in 0..{} ({}={})", n.rank, env.rank, env.world_size - 1, n.world_size,
         env.world_size);
  if (env.local_rank < 0 || env.local_rank >= env.world_size)
    fail("{}={}: allowed: an integer in 0..{} ({}={})", n.local_rank, env.local_rank, env.world_size - 1,
         n.world_size, env.world_size);
  if (env.master_addr.empty()) fail("{}='': allowed: a host name or IP address of rank 0's host", n.master_addr);
  if (env.master_port < 1 || env.master_port > 65535)
    fail("{}={}: allowed: a port in 1..65535", n.master_port, env.master_port);
}

// The integer value of environment variable `name`; nullopt when it is unset.
std::optional<int> env_int(const char* name) {
  const char* text = std::getenv(name);
  if (!text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno == ERANGE || value < INT_MIN || value > INT_MAX)
    fail("{}='{}': not an integer; allowed: an integer (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_PORT)",
         name, text);
  return int(value);
}

// ---------------------------------------------------------------------------------------------
// Sockets

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Milliseconds for poll() until `deadline` (0 once it has passed).
int poll_ms(Clock::time_point deadline) {
  const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(std::ceil(std::min(left, 1e6) * 1000));
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits for `events` on fd until deadline. False on timeout; POLLERR/POLLHUP count as ready (the
// next send or recv reports them).
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, poll_ms(deadline));
    if (ready > 0) return true;
    if (ready == 0) {
      if (poll_ms(deadline) == 0) return false;
      continue;
    }
    if (errno != EINTR) fail("tcp communicator: poll failed: {}", std::strerror(errno));
  }
}

struct AddressList {
  addrinfo* head = nullptr;
  ~AddressList() {
    if (head) ::freeaddrinfo(head);
  }
};

// The addresses of host:port (numeric or a name); passive: for bind().
void resolve(const std::string& host, int port, bool passive, AddressList& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &out.head);
  if (rc != 0) fail("tcp rendezvous: cannot resolve MASTER_ADDR '{}': {}", host, ::gai_strerror(rc));
}

Socket listen_on(const std::string& host, int port, int backlog) {
  AddressList addresses;
  resolve(host, port, true, addresses);
  std::string error = "no address";
  for (addrinfo* a = addresses.head; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (s.fd() < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int on = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), backlog) == 0) return s;
    error = std::strerror(errno);
  }
  fail("tcp rendezvous: rank 0 cannot listen on MASTER_ADDR:MASTER_PORT {}:{}: {} (is the port taken? MASTER_ADDR "
       "must be an address of rank 0's host)",
       host, port, error);
}

// A connected socket to host:port, retrying until deadline (rank 0 may not listen yet). Empty
// Socket on timeout; *last_error says why the last attempt failed.
Socket connect_until(const std::string& host, int port, Clock::time_point deadline, std::string* last_error) {
  for (;;) {
    AddressList addresses;
    resolve(host, port, false, addresses);
    for (addrinfo* a = addresses.head; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
      if (s.fd() < 0) {
        *last_error = std::strerror(errno);
        continue;
      }
      int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        if (!wait_for(s.fd(), POLLOUT, deadline)) {
          *last_error = "connect timed out";
          return Socket();
        }
        int so_error = 0;
        socklen_t len = sizeof so_error;
        ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &so_error, &len);
        rc = so_error == 0 ? 0 : -1;
        errno = so_error;
      }
      if (rc == 0) return s;
      *last_error = std::strerror(errno);
    }
    if (poll_ms(deadline) == 0) return Socket();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, poll_ms(deadline))));
  }
}

// One connection to a peer, with the names its errors use. Every receive (and every send that
// the peer does not drain) waits at most `timeout` seconds.
class Link {
 public:
  Link() = default;
  Link(Socket socket, int self, std::string peer, double timeout)
      : socket_(std::move(socket)), self_(self), peer_(std::move(peer)), timeout_(timeout) {
    const int on = 1;
    ::setsockopt(socket_.fd(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  }
  void set_peer(std::string peer) { peer_ = std::move(peer); }

  // Sends every byte of parts[0..count) in order (one segment when they fit: a receiver woken for
  // a frame's length finds its bytes with it).
  void send_all(iovec* parts, size_t count) {
    while (count > 0) {
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = count;
      const ssize_t k = ::sendmsg(socket_.fd(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait(POLLOUT, "did not take the data");
      } else if (k < 0 && errno != EINTR) {
        fail("tcp communicator: rank {} cannot send to {}: {} (did it stop?)", self_, peer_, std::strerror(errno));
      }
      for (size_t left = k > 0 ? size_t(k) : 0; count > 0 && (left > 0 || parts->iov_len == 0);) {
        const size_t step = std::min(left, parts->iov_len);
        parts->iov_base = static_cast<char*>(parts->iov_base) + step;
        parts->iov_len -= step;
        left -= step;
        if (parts->iov_len == 0) {
          ++parts;
          --count;
        }
      }
    }
  }

  void recv_all(void* into, size_t n) {
    char* data = static_cast<char*>(into);
    while (n > 0) {
      const ssize_t k = ::recv(socket_.fd(), data, n, MSG_DONTWAIT);
      if (k > 0) {
        data += k;
        n -= size_t(k);
      } else if (k == 0) {
        fail("tcp communicator: {} closed the connection to rank {} (did it stop or fail?)", peer_, self_);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait(POLLIN, "sent nothing");
      } else if (errno != EINTR) {
        fail("tcp communicator: rank {} cannot receive from {}: {} (did it stop?)", self_, peer_, std::strerror(errno));
      }
    }
  }

  // A frame: 8-byte length, then the bytes of `parts` (at most 3) in order.
  void send_frame(std::initializer_list<std::string_view> parts) {
    require(parts.size() <= 3, "tcp communicator: a frame of more than 3 parts");
    uint64_t n = 0;
    iovec io[4];
    size_t count = 0;
    io[count++] = {&n, sizeof n};
    for (std::string_view part : parts) {
      n += part.size();
      io[count++] = {const_cast<char*>(part.data()), part.size()};
    }
    send_all(io, count);
  }

  // A frame's length; its bytes follow (recv_all).
  uint64_t recv_length() {
    uint64_t n = 0;
    recv_all(&n, sizeof n);
    if (n > kMaxFrameBytes)
      fail("tcp communicator: rank {} got a frame of {} bytes from {} (garbled stream; limit {})", self_, n, peer_,
           kMaxFrameBytes);
    return n;
  }

  std::string recv_frame() {
    std::string bytes(size_t(recv_length()), '\0');
    recv_all(bytes.data(), bytes.size());
    return bytes;
  }

 private:
  static constexpr uint64_t kMaxFrameBytes = uint64_t(1) << 40;

  void wait(short events, const char* what) {
    if (!wait_for(socket_.fd(), events, deadline_after(timeout_)))
      fail("tcp communicator: rank {} timed out: {} {} for {} s (timeout_seconds); did it stop or stall?", self_, peer_,
           what, timeout_);
  }

  Socket socket_;
  int self_ = 0;
  std::string peer_;
  double timeout_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The tcp communicator

// What a rank says first after connecting to rank 0.
struct Hello {
  uint32_t magic = kMagic;
  int32_t rank = 0;
  int32_t world_size = 0;
  uint32_t reserved = 0;
  static constexpr uint32_t kMagic = 0x54524c31;  // "TRL1"
};

// all_reduce_sum's frames: this header, then the tensor's bytes.
struct TensorHeader {
  int64_t numel = 0;
  int32_t dtype = 0;  // c10::ScalarType
  int32_t reserved = 0;
};
// Rank 0's answer to all_reduce_sum: a status byte in a 16-byte prefix, then the sum's bytes
// (kSum) or the message every rank throws (kFailed).
constexpr size_t kAnswerPrefix = 16;
constexpr char kSum = 'S', kFailed = 'E';

std::string tensor_label(const TensorHeader& h) {
  return fmt::format("{} tensor of {} elements", c10::toString(c10::ScalarType(h.dtype)), h.numel);
}

// Rank 0's check of every rank's all_reduce_sum frame (header and payload size): "" when they
// agree, else the message every rank throws.
std::string header_problem(const std::vector<TensorHeader>& heads, const std::vector<uint64_t>& payload_bytes) {
  for (size_t r = 0; r < heads.size(); ++r) {
    const auto dtype = c10::ScalarType(heads[r].dtype);
    if (heads[r].dtype < 0 || heads[r].dtype >= int32_t(c10::ScalarType::NumOptions))
      return fmt::format("all_reduce_sum: rank {} sent a garbled frame", r);
    if (!c10::isFloatingType(dtype))
      return fmt::format("all_reduce_sum: rank {} passed a {} tensor; allowed: float, double, half, bfloat16", r,
                         c10::toString(dtype));
    if (heads[r].numel < 0 || payload_bytes[r] != uint64_t(heads[r].numel) * c10::elementSize(dtype))
      return fmt::format("all_reduce_sum: rank {} sent a garbled frame", r);
    if (heads[r].numel != heads[0].numel || heads[r].dtype != heads[0].dtype)
      return fmt::format(
          "all_reduce_sum: rank {} passed a {} but rank 0 a {}; every rank must pass the same dtype and number of "
          "elements",
          r, tensor_label(heads[r]), tensor_label(heads[0]));
  }
  return "";
}

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(const DistributedEnv& env, double timeout_seconds) : env_(env), timeout_(timeout_seconds) {
    if (env_.world_size == 1) return;  // the one-process world: no socket
    if (env_.rank == 0)
      accept_ranks();
    else
      join_rank0();
  }

  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }
  std::string backend() const override { return "tcp"; }

  std::vector<std::string> all_gather(const std::string& mine) override {
    if (env_.world_size == 1) return {mine};
    const std::string answer = exchange(mine, [](const std::vector<std::string>& frames) {
      std::string packed;
      for (const std::string& f : frames) {
        const uint64_t n = f.size();
        packed.append(reinterpret_cast<const char*>(&n), sizeof n).append(f);
      }
      return packed;
    });
    std::vector<std::string> all;
    for (size_t at = 0; at < answer.size();) {
      uint64_t n = 0;
      std::memcpy(&n, answer.data() + at, sizeof n);
      all.push_back(answer.substr(at + sizeof n, size_t(n)));
      at += sizeof n + size_t(n);
    }
    return all;
  }

  // Ranks 1.. send their tensor to rank 0, which checks every rank's dtype and size, adds them in
  // rank order into its own tensor and sends that sum back: every rank ends with the same bytes.
  // The bytes go from and to the tensors' memory (a contiguous CPU tensor's own) without copies.
  void all_reduce_sum(torch::Tensor& tensor) override {
    if (!tensor.defined()) fail("all_reduce_sum: rank {} passed an undefined tensor", env_.rank);
    if (env_.world_size == 1) {
      if (!tensor.is_floating_point())
        fail("all_reduce_sum: rank 0 passed a {} tensor; allowed: float, double, half, bfloat16",
             c10::toString(tensor.scalar_type()));
      return;
    }
    at::NoGradGuard no_grad;
    at::Tensor host = tensor.to(at::kCPU).contiguous();  // tensor itself when CPU and contiguous
    TensorHeader head;
    head.numel = host.numel();
    head.dtype = int32_t(host.scalar_type());
    const std::string_view header(reinterpret_cast<const char*>(&head), sizeof head);
    const std::string_view data(static_cast<const char*>(host.data_ptr()), size_t(host.nbytes()));
    if (env_.rank != 0) {
      links_[0].send_frame({header, data});
      const uint64_t n = links_[0].recv_length();
      char prefix[kAnswerPrefix];
      if (n < sizeof prefix) fail("all_reduce_sum: rank {} got a garbled answer from rank 0", env_.rank);
      links_[0].recv_all(prefix, sizeof prefix);
      if (prefix[0] == kFailed || n - sizeof prefix != data.size()) {
        std::string message(size_t(n - sizeof prefix), '\0');
        links_[0].recv_all(message.data(), message.size());
        throw Error(prefix[0] == kFailed ? message : "all_reduce_sum: a garbled answer from rank 0");
      }
      links_[0].recv_all(host.data_ptr(), data.size());
    } else {
      std::vector<TensorHeader> heads(size_t(env_.world_size), head);
      std::vector<uint64_t> payload_bytes(size_t(env_.world_size), data.size());
      scratch_.resize(size_t(env_.world_size));
      for (int r = 1; r < env_.world_size; ++r) {
        Link& link = links_[size_t(r)];
        const uint64_t n = link.recv_length();
        const uint64_t head_bytes = std::min<uint64_t>(n, sizeof(TensorHeader));
        heads[size_t(r)] = TensorHeader{0, -1, 0};
        link.recv_all(&heads[size_t(r)], size_t(head_bytes));
        payload_bytes[size_t(r)] = n - head_bytes;
        at::Tensor& into = scratch_[size_t(r)];
        if (!into.defined() || uint64_t(into.numel()) < payload_bytes[size_t(r)])
          into = at::empty({int64_t(payload_bytes[size_t(r)])}, at::kByte);
        link.recv_all(into.data_ptr(), size_t(payload_bytes[size_t(r)]));
      }
      const std::string problem = header_problem(heads, payload_bytes);
      if (problem.empty())
        for (int r = 1; r < env_.world_size; ++r)
          host.add_(at::from_blob(scratch_[size_t(r)].data_ptr(), host.sizes(), host.options()));
      const char prefix[kAnswerPrefix] = {problem.empty() ? kSum : kFailed};
      for (int r = 1; r < env_.world_size; ++r)
        links_[size_t(r)].send_frame({std::string_view(prefix, sizeof prefix), problem.empty() ? data : problem});
      if (!problem.empty()) throw Error(problem);
    }
    if (!host.is_same(tensor)) tensor.copy_(host);
  }

 private:
  std::string where() const { return fmt::format("{}:{}", env_.master_addr, env_.master_port); }

  // Rank 0: listens on MASTER_ADDR:MASTER_PORT until every other rank has said hello (or the
  // timeout), then tells each that the world is complete, or what was wrong.
  void accept_ranks() {
    const Socket listener = listen_on(env_.master_addr, env_.master_port, env_.world_size);
    const auto deadline = deadline_after(timeout_);
    links_.resize(size_t(env_.world_size));
    std::vector<bool> joined(size_t(env_.world_size), false);
    std::vector<Link> rejected;
    std::string problem;
    for (int count = 1; count < env_.world_size && problem.empty();) {
      if (!wait_for(listener.fd(), POLLIN, deadline)) {
        std::vector<int> missing;
        for (int r = 1; r < env_.world_size; ++r)
          if (!joined[size_t(r)]) missing.push_back(r);
        problem = fmt::format("tcp rendezvous at {}: rank 0 waited {} s (timeout_seconds) for rank(s) {} of {} to "
                              "connect; are they running with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE?",
                              where(), timeout_, fmt::join(missing, ", "), env_.world_size);
        break;
      }
      const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) continue;
        fail("tcp rendezvous at {}: rank 0 cannot accept: {}", where(), std::strerror(errno));
      }
      Link link(Socket(fd), 0, fmt::format("a process connecting to {}", where()), timeout_);
      Hello hello;
      hello.magic = 0;
      if (link.recv_length() == sizeof hello) link.recv_all(&hello, sizeof hello);
      if (hello.magic != Hello::kMagic)
        problem = fmt::format("tcp rendezvous at {}: a connection that is not a turnrl rank (bad hello)", where());
      else if (hello.world_size != env_.world_size)
        problem = fmt::format("tcp rendezvous at {}: rank {} has WORLD_SIZE={} but rank 0 has {}; every rank must "
                              "have the same WORLD_SIZE",
                              where(), hello.rank, hello.world_size, env_.world_size);
      else if (hello.rank < 1 || hello.rank >= env_.world_size || joined[size_t(hello.rank)])
        problem = fmt::format("tcp rendezvous at {}: a second process says it is rank {}; allowed: each of ranks "
                              "1..{} once",
                              where(), hello.rank, env_.world_size - 1);
      if (!problem.empty()) {
        rejected.push_back(std::move(link));
        break;
      }
      link.set_peer(fmt::format("rank {}", hello.rank));
      links_[size_t(hello.rank)] = std::move(link);
      joined[size_t(hello.rank)] = true;
      ++count;
    }
    // Every connected rank learns the outcome: an empty frame, or the message rank 0 throws.
    for (int r = 1; r < env_.world_size; ++r)
      if (joined[size_t(r)]) links_[size_t(r)].send_frame({problem});
    for (Link& link : rejected) link.send_frame({problem});
    if (!problem.empty()) throw Error(problem);
  }

  // Ranks 1..: connect to rank 0 (retrying until it listens), say hello, wait for the world.
  void join_rank0() {
    std::string last_error;
    Socket socket = connect_until(env_.master_addr, env_.master_port, deadline_after(timeout_), &last_error);
    if (socket.fd() < 0)
      fail("tcp rendezvous: rank {} could not connect to rank 0 at MASTER_ADDR:MASTER_PORT {} within {} s "
           "(timeout_seconds; last error: {}); is rank 0 running with the same MASTER_ADDR and MASTER_PORT?",
           env_.rank, where(), timeout_, last_error);
    links_.emplace_back(std::move(socket), env_.rank, fmt::format("rank 0 at {}", where()), timeout_);
    Hello hello;
    hello.rank = env_.rank;
    hello.world_size = env_.world_size;
    links_[0].send_frame({std::string_view(reinterpret_cast<const char*>(&hello), sizeof hello)});
    const std::string problem = links_[0].recv_frame();
    if (!problem.empty()) throw Error(problem);
  }

  // Ranks 1.. send `mine` to rank 0; rank 0 answers every rank (itself included) with
  // combine(every rank's bytes in rank order). Returns the answer.
  std::string exchange(std::string mine, const std::function<std::string(const std::vector<std::string>&)>& combine) {
    if (env_.rank != 0) {
      links_[0].send_frame({mine});
      return links_[0].recv_frame();
    }
    std::vector<std::string> frames(size_t(env_.world_size));
    frames[0] = std::move(mine);
    for (int r = 1; r < env_.world_size; ++r) frames[size_t(r)] = links_[size_t(r)].recv_frame();
    std::string answer = combine(frames);
    for (int r = 1; r < env_.world_size; ++r) links_[size_t(r)].send_frame({answer});
    return answer;
  }

  DistributedEnv env_;
  double timeout_;
  std::vector<Link> links_;  // rank 0: links_[r] to rank r (links_[0] unused); others: links_[0] to rank 0
  std::vector<at::Tensor> scratch_;  // rank 0: bytes received from rank r, kept for the next call
};

}  // namespace

// ---------------------------------------------------------------------------------------------

DistributedEnv distributed_env_from_environment() {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  DistributedEnv env;
  if (!rank && !world) return env;
  if (!rank || !world)
    fail("{}='{}' is set but {} is not; allowed: both RANK and WORLD_SIZE (a rank of a world) or neither (one "
         "process)",
         rank ? "RANK" : "WORLD_SIZE", rank ? rank : world, rank ? "WORLD_SIZE" : "RANK");
  env.world_size = *env_int("WORLD_SIZE");
  env.rank = *env_int("RANK");
  env.local_rank = env_int("LOCAL_RANK").value_or(env.rank);
  if (const char* addr = std::getenv("MASTER_ADDR")) env.master_addr = addr;
  env.master_port = env_int("MASTER_PORT").value_or(env.master_port);
  validate(env, kVariableNames);
  return env;
}

void Communicator::barrier() { all_gather(""); }

bool nccl_available() {
#ifdef TURNRL_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_communicator(const DistributedEnv& env, const torch::Device& device,
                                                const CommunicatorOptions& options) {
  validate(env, kFieldNames);
  const std::string& backend = options.backend;
  if (backend != "auto" && backend != "nccl" && backend != "tcp")
    fail("distributed.backend: unknown '{}'; allowed: auto, nccl, tcp", backend);
  if (backend == "nccl" && !device.is_cuda())
    fail("distributed.backend: 'nccl' sums CUDA tensors but the device is {}; allowed here: auto, tcp", device.str());
  if (backend == "nccl" && !nccl_available())
    fail("distributed.backend: 'nccl' but this build of turnrl has no NCCL (it needs CUDA and NCCL at configure "
         "time); allowed here: auto, tcp");
  if (!(options.timeout_seconds > 0))
    fail("distributed.timeout_seconds: {}; allowed: a number of seconds > 0", options.timeout_seconds);
  auto tcp = std::make_unique<TcpCommunicator>(env, options.timeout_seconds);
#ifdef TURNRL_WITH_NCCL
  if (backend != "tcp" && device.is_cuda() && env.world_size > 1)
    return make_nccl_communicator(env, std::move(tcp), device.has_index() ? device.index() : env.local_rank);
#endif
  return tcp;
}

// ---------------------------------------------------------------------------------------------

GradientBuckets::GradientBuckets(std::vector<torch::Tensor> params, int64_t bucket_bytes) : params_(std::move(params)) {
  if (bucket_bytes <= 0) fail("distributed.bucket_mb: {} bytes per bucket; allowed: > 0", bucket_bytes);
  int64_t filled = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    if (!p.defined() || !p.is_floating_point())
      fail("GradientBuckets: parameter {} is {}; allowed: floating-point tensors", i,
           p.defined() ? c10::toString(p.scalar_type()) : "undefined");
    const int64_t bytes = p.numel() * int64_t(p.element_size());
    const torch::Tensor* first = buckets_.empty() ? nullptr : &params_[buckets_.back().front()];
    const bool fits = first && first->scalar_type() == p.scalar_type() && first->device() == p.device() &&
                      filled + bytes <= bucket_bytes;
    if (!fits) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().push_back(i);
    filled += bytes;
  }
}

void GradientBuckets::all_reduce_sum(Communicator& comm) {
  at::NoGradGuard no_grad;
  for (const std::vector<size_t>& bucket : buckets_) {
    const torch::Tensor& first = params_[bucket.front()];
    int64_t total = 0;
    for (size_t i : bucket) total += params_[i].numel();
    torch::Tensor flat = at::empty({total}, at::TensorOptions().dtype(first.scalar_type()).device(first.device()));
    int64_t offset = 0;
    for (size_t i : bucket) {
      const int64_t n = params_[i].numel();
      torch::Tensor slice = flat.narrow(0, offset, n);
      const torch::Tensor& grad = params_[i].grad();
      if (grad.defined())
        slice.copy_(grad.reshape({-1}));
      else
        slice.zero_();
      offset += n;
    }
    comm.all_reduce_sum(flat);
    offset = 0;
    for (size_t i : bucket) {
      torch::Tensor& param = params_[i];
      const torch::Tensor summed = flat.narrow(0, offset, param.numel()).view(param.sizes());
      torch::Tensor& grad = param.mutable_grad();
      if (grad.defined())
        grad.copy_(summed);
      else
        grad = summed.clone();
      offset += param.numel();
    }
  }
}

}  // namespace turnrl
