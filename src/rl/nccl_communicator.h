#pragma once
// Private to src/rl: the NCCL communicator (nccl_communicator_cuda.cpp, in CUDA builds with
// NCCL only), built by make_communicator.
#include <memory>

#include "turnrl/rl/distributed.h"

namespace turnrl {

// The NCCL communicator of env.rank on CUDA device device_index. rendezvous (a tcp communicator of
// the same world) hands out rank 0's ncclUniqueId and then carries all_gather.
std::unique_ptr<Communicator> make_nccl_communicator(const DistributedEnv& env, std::unique_ptr<Communicator> rendezvous,
                                                     int device_index);

}  // namespace turnrl
