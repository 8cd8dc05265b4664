// The nccl communicator: tensor sums with ncclAllReduce on the current CUDA stream; host bytes
// (all_gather) through the tcp rendezvous that also handed out rank 0's ncclUniqueId.
#include "nccl_communicator.h"

#include <cstdlib>
#include <cstring>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include <fmt/format.h>

#include "turnrl/core/error.h"

namespace turnrl {
namespace {

void check_nccl(ncclResult_t rc, const char* call, int rank) {
  if (rc == ncclSuccess) return;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  fail("nccl communicator: {} failed on rank {}: {} ({})", call, rank, ncclGetErrorString(rc), ncclGetLastError(nullptr));
#else
  fail("nccl communicator: {} failed on rank {}: {}", call, rank, ncclGetErrorString(rc));
#endif
}

ncclDataType_t nccl_type(c10::ScalarType type, int rank) {
  switch (type) {
    case c10::ScalarType::Float: return ncclFloat32;
    case c10::ScalarType::Double: return ncclFloat64;
    case c10::ScalarType::Half: return ncclFloat16;
    case c10::ScalarType::BFloat16: return ncclBfloat16;
    default:
      fail("all_reduce_sum: rank {} passed a {} tensor; allowed with nccl: float, double, half, bfloat16", rank,
           c10::toString(type));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const DistributedEnv& env, std::unique_ptr<Communicator> rendezvous, int device_index)
      : rendezvous_(std::move(rendezvous)), device_index_(device_index) {
    // NVLink multicast (NVLS) stays off on our machines; a value the user set wins.
    ::setenv("NCCL_NVLS_ENABLE", "0", 0);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (env.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", env.rank);
    const std::vector<std::string> ids =
        rendezvous_->all_gather(env.rank == 0 ? std::string(reinterpret_cast<const char*>(&id), sizeof id) : "");
    if (ids[0].size() != sizeof id)
      fail("nccl communicator: rank {} got a unique id of {} bytes from rank 0; expected {} (ranks built with "
           "different NCCL versions?)",
           env.rank, ids[0].size(), sizeof id);
    std::memcpy(&id, ids[0].data(), sizeof id);
    const c10::cuda::CUDAGuard guard{c10::DeviceIndex(device_index_)};
    check_nccl(ncclCommInitRank(&comm_, env.world_size, id, env.rank), "ncclCommInitRank", env.rank);
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rendezvous_->rank(); }
  int world_size() const override { return rendezvous_->world_size(); }
  std::string backend() const override { return "nccl"; }

  std::vector<std::string> all_gather(const std::string& mine) override { return rendezvous_->all_gather(mine); }

  // NCCL cannot report a peer's mismatched tensor or a dead peer, it waits: every call first agrees
  // on dtype and size through the TCP rendezvous (one small round trip per bucket), which also
  // turns a rank that died into an error on the others within the timeout.
  void all_reduce_sum(torch::Tensor& tensor) override {
    if (!tensor.defined() || !tensor.is_cuda() || tensor.device().index() != device_index_ || !tensor.is_contiguous())
      fail("all_reduce_sum: rank {} passed a {} tensor; allowed with nccl: a contiguous tensor on cuda:{} (the "
           "communicator's device)",
           rank(), !tensor.defined() ? "undefined" : !tensor.is_contiguous() ? "non-contiguous" : tensor.device().str(),
           device_index_);
    const ncclDataType_t type = nccl_type(tensor.scalar_type(), rank());
    const std::string mine = fmt::format("{} x {}", c10::toString(tensor.scalar_type()), tensor.numel());
    const std::vector<std::string> all = rendezvous_->all_gather(mine);
    for (size_t r = 0; r < all.size(); ++r)
      if (all[r] != all[0])
        fail("all_reduce_sum: rank {} passed {}, rank 0 {}; every rank must pass the same dtype and size", r, all[r],
             all[0]);
    const c10::cuda::CUDAGuard guard(tensor.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(tensor.device().index()).stream();
    check_nccl(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), size_t(tensor.numel()), type, ncclSum, comm_, stream),
               "ncclAllReduce", rank());
  }

 private:
  std::unique_ptr<Communicator> rendezvous_;
  int device_index_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const DistributedEnv& env, std::unique_ptr<Communicator> rendezvous,
                                                     int device_index) {
  return std::make_unique<NcclCommunicator>(env, std::move(rendezvous), device_index);
}

}  // namespace turnrl
