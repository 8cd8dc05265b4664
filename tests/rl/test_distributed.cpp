// Data parallelism's parts: torchrun's environment, the tcp communicator (ranks as threads of
// this process on a loopback port), gradient buckets and the backend choice.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <numeric>
#include <optional>
#include <thread>

#include "support/loopback.h"
#include "turnrl/core/error.h"
#include "turnrl/rl/distributed.h"

using namespace turnrl;

namespace {

// Sets (or, with nullopt, unsets) environment variables for one scope and restores them after.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      set(name, value);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) set(name, value);
  }

 private:
  static void set(const std::string& name, const std::optional<std::string>& value) {
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

// torchrun's variables, all unset.
std::map<std::string, std::optional<std::string>> no_torchrun() {
  return {{"RANK", std::nullopt}, {"WORLD_SIZE", std::nullopt}, {"LOCAL_RANK", std::nullopt},
          {"MASTER_ADDR", std::nullopt}, {"MASTER_PORT", std::nullopt}};
}

// Ranks 0..world-1 of a world on a fresh loopback port.
std::vector<DistributedEnv> world_of(int world) {
  const int port = testing::free_loopback_port();
  std::vector<DistributedEnv> envs(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) envs[size_t(r)] = {r, world, r, "127.0.0.1", port};
  return envs;
}

// Runs fn(comm, rank) for every env in its own thread, each with a tcp communicator. Returns each
// rank's error message, "" where it returned normally. Catch assertions stay on the main thread.
std::vector<std::string> run_ranks(const std::vector<DistributedEnv>& envs,
                                   const std::function<void(Communicator&, int)>& fn, double timeout_seconds = 5) {
  std::vector<std::string> errors(envs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < envs.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        const auto comm = make_communicator(envs[i], torch::kCPU, CommunicatorOptions{"tcp", timeout_seconds});
        fn(*comm, int(i));
      } catch (const std::exception& e) {
        errors[i] = e.what();
        if (errors[i].empty()) errors[i] = "(empty message)";
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int open_file_descriptors() {
  int n = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  while (::readdir(dir)) ++n;
  ::closedir(dir);
  return n;
}

std::string megabyte_payload(int rank) {
  std::string s(size_t(1) << 20, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = char((i * 31 + size_t(rank) * 7) % 251);
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("distributed env: no torchrun variables is the one-process world", "[trainer][distributed]") {
  const ScopedEnv env(no_torchrun());
  const DistributedEnv e = distributed_env_from_environment();
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.local_rank == 0);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 29500);
}

TEST_CASE("distributed env: torchrun's variables are read, LOCAL_RANK defaults to RANK", "[trainer][distributed]") {
  auto values = no_torchrun();
  values["RANK"] = "2";
  values["WORLD_SIZE"] = "4";
  values["MASTER_ADDR"] = "node0.cluster";
  values["MASTER_PORT"] = "1234";
  {
    const ScopedEnv env(values);
    const DistributedEnv e = distributed_env_from_environment();
    CHECK(e.rank == 2);
    CHECK(e.world_size == 4);
    CHECK(e.local_rank == 2);
    CHECK(e.master_addr == "node0.cluster");
    CHECK(e.master_port == 1234);
  }
  values["LOCAL_RANK"] = "0";
  const ScopedEnv env(values);
  CHECK(distributed_env_from_environment().local_rank == 0);
}

TEST_CASE("distributed env: every invalid value fails naming its variable and value", "[trainer][distributed]") {
  struct Case {
    std::map<std::string, std::string> set;
    std::string message;  // a part of the error
  };
  const std::vector<Case> cases = {
      {{{"RANK", "1"}}, "RANK='1' is set but WORLD_SIZE is not"},
      {{{"WORLD_SIZE", "2"}}, "WORLD_SIZE='2' is set but RANK is not"},
      {{{"RANK", "one"}, {"WORLD_SIZE", "2"}}, "RANK='one': not an integer"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2x"}}, "WORLD_SIZE='2x': not an integer"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0: allowed: an integer >= 1"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2: allowed: an integer in 0..1 (WORLD_SIZE=2)"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK=-1: allowed"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", ""}}, "LOCAL_RANK='': not an integer"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}, "LOCAL_RANK=2: allowed: an integer in 0..1"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}}, "MASTER_ADDR='': allowed"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}, "MASTER_PORT=0: allowed: a port in 1..65535"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "65536"}}, "MASTER_PORT=65536: allowed"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "80a"}}, "MASTER_PORT='80a': not an integer"},
  };
  for (const Case& c : cases) {
    auto values = no_torchrun();
    for (const auto& [name, value] : c.set) values[name] = value;
    const ScopedEnv env(values);
    INFO(c.message);
    CHECK_THROWS_WITH(distributed_env_from_environment(), Catch::Contains(c.message));
  }
}

// ---------------------------------------------------------------------------------------------

TEST_CASE("tcp communicator: all_gather gives every rank all bytes in rank order", "[trainer][distributed]") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    std::vector<std::vector<std::vector<std::string>>> seen(static_cast<size_t>(world));  // [rank][call] -> gathered
    const auto errors = run_ranks(world_of(world), [&](Communicator& comm, int rank) {
      auto& mine = seen[size_t(rank)];
      mine.push_back(comm.all_gather("rank " + std::to_string(rank)));
      mine.push_back(comm.all_gather(""));
      mine.push_back(comm.all_gather(megabyte_payload(rank)));
      mine.push_back(comm.all_gather(rank == 1 ? "only rank 1" : ""));
      comm.barrier();
      mine.push_back({comm.backend(), std::to_string(comm.rank()), std::to_string(comm.world_size())});
    });
    CHECK(errors == std::vector<std::string>(size_t(world)));
    for (int r = 0; r < world; ++r) {
      const auto& calls = seen[size_t(r)];
      REQUIRE(calls.size() == 5);
      for (int q = 0; q < world; ++q) {
        CHECK(calls[0][size_t(q)] == "rank " + std::to_string(q));
        CHECK(calls[1][size_t(q)].empty());
        CHECK(calls[2][size_t(q)] == megabyte_payload(q));
        CHECK(calls[3][size_t(q)] == (q == 1 ? "only rank 1" : ""));
      }
      CHECK(calls[0].size() == size_t(world));
      CHECK(calls[4] == std::vector<std::string>{"tcp", std::to_string(r), std::to_string(world)});
    }
  }
}

TEST_CASE("tcp communicator: all_reduce_sum is the rank-order sum, bitwise the same on every rank",
          "[trainer][distributed]") {
  const int world = 3;
  // Magnitudes far apart (within half's range), so that another order of addition would round
  // differently.
  auto input = [](int rank, at::ScalarType dtype) {
    const double scale = at::elementSize(dtype) == 2 ? 10 : 1e4;
    return (torch::sin(torch::arange(257, at::kDouble) * (rank + 1.3)) * std::pow(scale, rank)).to(dtype);
  };
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    INFO(c10::toString(dtype));
    std::vector<torch::Tensor> results(world), strided(world);
    const auto errors = run_ranks(world_of(world), [&](Communicator& comm, int rank) {
      torch::Tensor t = input(rank, dtype);
      comm.all_reduce_sum(t);
      results[size_t(rank)] = t;
      // A non-contiguous view is summed in place as well.
      torch::Tensor m = torch::full({4, 3}, double(rank + 1), at::TensorOptions().dtype(dtype)).t();
      comm.all_reduce_sum(m);
      strided[size_t(rank)] = m;
    });
    CHECK(errors == std::vector<std::string>(world));
    const torch::Tensor expected = input(0, dtype) + input(1, dtype) + input(2, dtype);
    for (int r = 0; r < world; ++r) {
      CHECK(results[size_t(r)].scalar_type() == dtype);
      CHECK(torch::equal(results[size_t(r)], expected));
      CHECK(torch::equal(strided[size_t(r)], torch::full({3, 4}, 6.0, at::TensorOptions().dtype(dtype))));
    }
  }
}

TEST_CASE("tcp communicator: a mismatched tensor fails every rank with the same message, then goes on",
          "[trainer][distributed]") {
  struct Case {
    int64_t numel_rank1;
    at::ScalarType dtype_rank1;
    std::string message;
  };
  for (const Case& c : {Case{5, at::kFloat, "rank 1 passed a Float tensor of 5 elements but rank 0 a Float tensor of 4"},
                        Case{4, at::kDouble, "rank 1 passed a Double tensor of 4 elements but rank 0 a Float"},
                        Case{4, at::kLong, "rank 1 passed a Long tensor; allowed: float, double, half, bfloat16"}}) {
    std::vector<std::string> caught(2), after(2);
    const auto errors = run_ranks(world_of(2), [&](Communicator& comm, int rank) {
      torch::Tensor t = rank == 1 ? torch::ones({c.numel_rank1}, c.dtype_rank1) : torch::ones({4});
      try {
        comm.all_reduce_sum(t);
      } catch (const Error& e) {
        caught[size_t(rank)] = e.what();
      }
      after[size_t(rank)] = comm.all_gather(std::to_string(rank))[1];
    });
    CHECK(errors == std::vector<std::string>(2));
    CHECK_THAT(caught[0], Catch::Contains(c.message));
    CHECK(caught[1] == caught[0]);
    CHECK(after == std::vector<std::string>{"1", "1"});
  }
}

TEST_CASE("tcp communicator: a rank that never comes fails the others within the timeout", "[trainer][distributed]") {
  const double timeout = 1;
  SECTION("rank 0 waits for rank 1") {
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = run_ranks({world_of(2)[0]}, [](Communicator&, int) {}, timeout);
    CHECK(seconds_since(t0) < 3 * timeout);
    CHECK_THAT(errors[0], Catch::Contains("waited 1 s (timeout_seconds) for rank(s) 1 of 2 to connect"));
  }
  SECTION("rank 1 waits for rank 0") {
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = run_ranks({world_of(2)[1]}, [](Communicator&, int) {}, timeout);
    CHECK(seconds_since(t0) < 3 * timeout);
    CHECK_THAT(errors[0], Catch::Contains("rank 1 could not connect to rank 0 at MASTER_ADDR:MASTER_PORT 127.0.0.1:"));
  }
}

TEST_CASE("tcp communicator: a rank that stops calling or exits fails the others, naming it",
          "[trainer][distributed]") {
  const double timeout = 1;
  SECTION("stalled: a timeout") {
    std::promise<void> rank0_done;
    std::shared_future<void> done = rank0_done.get_future().share();
    double waited = 0;
    const auto errors = run_ranks(
        world_of(2),
        [&](Communicator& comm, int rank) {
          if (rank == 1) return done.wait();  // connected, but never calls
          const auto t0 = std::chrono::steady_clock::now();
          try {
            comm.all_gather("hello");
          } catch (...) {
            waited = seconds_since(t0);
            rank0_done.set_value();
            throw;
          }
          rank0_done.set_value();
        },
        timeout);
    CHECK_THAT(errors[0], Catch::Contains("rank 0 timed out: rank 1 sent nothing for 1 s (timeout_seconds)"));
    CHECK(errors[1].empty());
    CHECK(waited >= 0.9 * timeout);
    CHECK(waited < 3 * timeout);
  }
  SECTION("exited: the connection closes") {
    const auto errors = run_ranks(
        world_of(3),
        [&](Communicator& comm, int rank) {
          if (rank == 2) return;  // leaves after the rendezvous
          comm.all_gather("hello");
        },
        timeout);
    CHECK_THAT(errors[0], Catch::Contains("rank 2 closed the connection to rank 0"));
    CHECK_THAT(errors[1], Catch::Contains("rank 0 at 127.0.0.1:"));  // rank 0 failed and left
    CHECK(errors[2].empty());
  }
}

TEST_CASE("tcp rendezvous: a wrong WORLD_SIZE or a second rank 1 fails every rank", "[trainer][distributed]") {
  SECTION("WORLD_SIZE") {
    std::vector<DistributedEnv> envs = world_of(2);
    envs[1].world_size = 3;
    const auto errors = run_ranks(envs, [](Communicator&, int) {});
    CHECK_THAT(errors[0], Catch::Contains("rank 1 has WORLD_SIZE=3 but rank 0 has 2"));
    CHECK(errors[1] == errors[0]);
  }
  SECTION("duplicate rank") {
    std::vector<DistributedEnv> envs = world_of(3);
    envs[2].rank = 1;
    const auto errors = run_ranks(envs, [](Communicator&, int) {});
    CHECK_THAT(errors[0], Catch::Contains("a second process says it is rank 1; allowed: each of ranks 1..2 once"));
    CHECK(errors[1] == errors[0]);
    CHECK(errors[2] == errors[0]);
  }
}

TEST_CASE("one-process world: no socket, all_gather and all_reduce_sum are the identity", "[trainer][distributed]") {
  // Rank 0 of a world of one must not listen: its port is taken here, and no descriptor opens.
  const int port = testing::free_loopback_port();
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(uint16_t(port));
  REQUIRE(::bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(taken, 1) == 0);
  const int before = open_file_descriptors();
  const auto comm = make_communicator(DistributedEnv{0, 1, 0, "127.0.0.1", port}, torch::kCPU);
  CHECK(open_file_descriptors() == before);
  ::close(taken);
  CHECK(comm->backend() == "tcp");
  CHECK(comm->world_size() == 1);
  CHECK(comm->all_gather("mine") == std::vector<std::string>{"mine"});
  torch::Tensor t = torch::arange(5, at::kFloat);
  comm->all_reduce_sum(t);
  CHECK(torch::equal(t, torch::arange(5, at::kFloat)));
  comm->barrier();
  torch::Tensor ints = torch::arange(5);
  CHECK_THROWS_WITH(comm->all_reduce_sum(ints), Catch::Contains("rank 0 passed a Long tensor; allowed: float"));
}

TEST_CASE("make_communicator: backends and the env are validated", "[trainer][distributed]") {
  const DistributedEnv one;
  CHECK_THROWS_WITH(make_communicator(one, torch::kCPU, {"gloo"}),
                    Catch::Contains("distributed.backend: unknown 'gloo'; allowed: auto, nccl, tcp"));
  CHECK_THROWS_WITH(make_communicator(one, torch::kCPU, {"nccl"}),
                    Catch::Contains("'nccl' sums CUDA tensors but the device is cpu"));
  if (!nccl_available())
    CHECK_THROWS_WITH(make_communicator(one, torch::Device(torch::kCUDA, 0), {"nccl"}),
                      Catch::Contains("this build of turnrl has no NCCL"));
  CHECK_THROWS_WITH(make_communicator(one, torch::kCPU, {"tcp", 0}), Catch::Contains("distributed.timeout_seconds: 0"));
  CHECK_THROWS_WITH(make_communicator(DistributedEnv{2, 2, 0, "127.0.0.1", 29500}, torch::kCPU),
                    Catch::Contains("DistributedEnv.rank=2: allowed: an integer in 0..1"));
  CHECK_THROWS_WITH(make_communicator(DistributedEnv{0, 1, 0, "127.0.0.1", 0}, torch::kCPU),
                    Catch::Contains("DistributedEnv.master_port=0"));
  CHECK(make_communicator(one, torch::kCPU, {"auto"})->backend() == "tcp");
  CHECK(make_communicator(one, torch::kCPU, {"tcp"})->rank() == 0);
}

// ---------------------------------------------------------------------------------------------

TEST_CASE("GradientBuckets: buckets follow parameter order and size, never mixing dtypes", "[trainer][distributed]") {
  auto floats = [](std::vector<int64_t> sizes, std::vector<at::ScalarType> dtypes = {}) {
    std::vector<torch::Tensor> params;
    for (size_t i = 0; i < sizes.size(); ++i) params.push_back(torch::zeros({sizes[i]}, dtypes.empty() ? at::kFloat : dtypes[i]));
    return params;
  };
  CHECK(GradientBuckets(floats({10, 10, 30}), 80).bucket_count() == 2);    // [0, 1] [2]
  CHECK(GradientBuckets(floats({10, 10, 30}), 79).bucket_count() == 3);    // [0] [1] [2]
  CHECK(GradientBuckets(floats({10, 10, 30}), 200).bucket_count() == 1);   // [0, 1, 2]
  CHECK(GradientBuckets(floats({30, 10, 10}), 80).bucket_count() == 2);    // [0] (over the size) [1, 2]
  CHECK(GradientBuckets(floats({10, 10, 10}, {at::kFloat, at::kDouble, at::kDouble}), 1 << 20).bucket_count() == 2);
  CHECK(GradientBuckets({}, 80).bucket_count() == 0);
  CHECK_THROWS_WITH(GradientBuckets(floats({10}), 0), Catch::Contains("0 bytes per bucket; allowed: > 0"));
  CHECK_THROWS_WITH(GradientBuckets({torch::zeros({3}, at::kLong)}, 80),
                    Catch::Contains("parameter 0 is Long; allowed: floating-point"));
}

TEST_CASE("GradientBuckets: two ranks' gradients summed, an undefined gradient counting as zeros",
          "[trainer][distributed]") {
  const std::vector<std::vector<int64_t>> shapes = {{3, 4}, {5}, {2, 2, 2}, {7}};
  auto grad_of = [](int rank, size_t i, const std::vector<int64_t>& shape) {
    const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
    return (torch::arange(n, at::kFloat) + float(i * 100 + 1)).reshape(shape) * float(rank + 1);
  };
  std::vector<std::vector<torch::Tensor>> params(2);
  std::vector<size_t> bucket_counts(2);
  const auto errors = run_ranks(world_of(2), [&](Communicator& comm, int rank) {
    auto& mine = params[size_t(rank)];
    for (size_t i = 0; i < shapes.size(); ++i) {
      mine.push_back(torch::zeros(shapes[i]).requires_grad_(true));
      if (!(rank == 1 && i == 1)) mine.back().mutable_grad() = grad_of(rank, i, shapes[i]);
    }
    GradientBuckets buckets(mine, 60);  // bytes: [0: 48] [1: 20, 2: 32] [3: 28]
    bucket_counts[size_t(rank)] = buckets.bucket_count();
    buckets.all_reduce_sum(comm);
  });
  CHECK(errors == std::vector<std::string>(2));
  CHECK(bucket_counts == std::vector<size_t>{3, 3});
  for (size_t i = 0; i < shapes.size(); ++i) {
    INFO("parameter " << i);
    const torch::Tensor expected = i == 1 ? grad_of(0, i, shapes[i]) : grad_of(0, i, shapes[i]) + grad_of(1, i, shapes[i]);
    for (int r = 0; r < 2; ++r) {
      const torch::Tensor& grad = params[size_t(r)][i].grad();
      REQUIRE(grad.defined());
      CHECK(grad.sizes() == params[size_t(r)][i].sizes());
      CHECK(torch::equal(grad, expected));
    }
  }
}
