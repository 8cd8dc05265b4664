#pragma once
// Device time of work queued on one CUDA stream, between two events: for the tuning of the decode
// projections (tuned_gemm_cuda.cpp) and the GPU benchmarks. CUDA builds only.
#include <cuda_runtime.h>

namespace turnrl::detail {

// Milliseconds of device time from before to after what queue() enqueues on `stream` (it waits
// for that work to finish).
template <typename F>
double device_milliseconds(cudaStream_t stream, const F& queue) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  queue();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms);
}

}  // namespace turnrl::detail
