#pragma once
// Data parallelism for the trainer: one process per device (a rank), found through the
// environment variables torchrun sets (or `turnrl train --nproc N`, which sets them), talking
// through a Communicator:
//   tcp   a star over TCP through MASTER_ADDR:MASTER_PORT (rank 0 listens, the others connect);
//         host bytes and tensors of any device (CUDA ones travel through the host). It is also the
//         rendezvous that hands NCCL its unique id.
//   nccl  CUDA builds with NCCL: tensor sums with ncclAllReduce on the current CUDA stream; host
//         bytes through its rendezvous.
// Sums are taken in rank order on every rank (tcp), so every rank ends with bitwise the same
// tensor and the ranks' parameters never drift apart.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

namespace turnrl {

// Where this process sits in the world.
struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // the rank on this host: picks the CUDA device
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK (default: RANK), MASTER_ADDR (default 127.0.0.1) and
// MASTER_PORT (default 29500). Neither RANK nor WORLD_SIZE set: the one-process world. Throws
// turnrl::Error naming the variable, its value and what is allowed (integers, WORLD_SIZE >= 1,
// 0 <= RANK < WORLD_SIZE, both or neither set, a port in 1..65535).
DistributedEnv distributed_env_from_environment();

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;  // "tcp" | "nccl"
  // Every rank's bytes in rank order; the same vector on every rank. Collective: every rank calls.
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
  // In place: the element-wise sum over ranks of a contiguous floating-point tensor of the same
  // shape and dtype on every rank. Collective.
  virtual void all_reduce_sum(torch::Tensor& tensor) = 0;
  // Returns once every rank has called it.
  void barrier();
};

struct CommunicatorOptions {
  std::string backend = "auto";  // auto (nccl for a CUDA device when built with NCCL, else tcp) | nccl | tcp
  double timeout_seconds = 300;  // connecting and every receive; a dead or stuck rank fails the others
};

// The communicator of this rank; world_size 1 needs no peers (and opens no socket).
// Throws turnrl::Error for an unknown backend, nccl in a build without it or for a CPU device,
// and when the rendezvous fails (the message names MASTER_ADDR:MASTER_PORT and the rank).
std::unique_ptr<Communicator> make_communicator(const DistributedEnv& env, const torch::Device& device,
                                                const CommunicatorOptions& options = {});

// True when this build has the NCCL communicator.
bool nccl_available();

// Parameter gradients summed over ranks in flattened buckets of about bucket_bytes: one collective
// per bucket instead of one per parameter (as DDP buckets). Buckets follow parameter order and
// never mix dtypes or devices.
class GradientBuckets {
 public:
  GradientBuckets(std::vector<torch::Tensor> params, int64_t bucket_bytes);
  // Every parameter's .grad := its sum over ranks. An undefined .grad counts as zeros (a rank with
  // no rows this step still takes part) and is defined afterwards.
  void all_reduce_sum(Communicator& comm);
  size_t bucket_count() const { return buckets_.size(); }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<size_t>> buckets_;  // parameter indices
};

}  // namespace turnrl
