#pragma once
// Programmatic dependent launch (compute capability 9.0 on) for the decoder's own kernels: a kernel
// launched by launch_dependent() may be scheduled before the kernel ahead of it in the stream has
// finished, and waits inside, in wait_for_previous_grid(), until that kernel has completed and its
// writes are visible. What it saves is the gap between two kernels of a decode step (the grid's
// launch and its blocks' start-up), about a microsecond each, 10 of them a layer. Every kernel
// launched this way calls wait_for_previous_grid() before it touches memory that the kernel ahead
// may write (decode_gemm.cu reads its weights before, nothing else), so it computes what a plain
// launch computes; allow_next_grid() right after lets the next such kernel be scheduled in
// turn (it still waits for this one to complete). Older GPUs get a plain launch, and both calls
// compile to nothing there.
#include <cuda_runtime.h>

#include <atomic>
#include <utility>

#include "decoder_kernels.cuh"

namespace turnrl::decoder_kernels {

__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The first statement of every kernel launch_dependent() launches: waits for the kernel ahead,
// then lets the next one be scheduled.
__device__ __forceinline__ void start_after_previous_grid() {
  wait_for_previous_grid();
  allow_next_grid();
}

// The current device's compute capability (major) and SM count, asked once a device: the decoder's
// kernels ask before every launch. False when the device cannot be asked.
inline bool current_device(int& major, int& sm_count) {
  constexpr int kDevices = 64;
  static std::atomic<int> majors[kDevices] = {}, sm_counts[kDevices] = {};  // 0: not asked yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return false;
  if (sm_counts[device].load() == 0) {
    int m = 0, s = 0;
    if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&s, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || s <= 0)
      return false;
    majors[device] = m;  // before the count that says it is known
    sm_counts[device] = s;
  }
  major = majors[device].load();
  sm_count = sm_counts[device].load();
  return true;
}

// Whether the current device takes programmatic dependent launches (compute capability >= 9.0,
// and a runtime and driver of CUDA 12.3 or later, which capture them into graphs), asked once a
// device, and they are on (set_dependent_launch, decoder_kernels.cuh).
inline bool dependent_launch_supported() {
#if CUDART_VERSION < 12030
  return false;
#else
  if (!dependent_launch_enabled()) return false;
  static const bool driver_takes_them = [] {
    int version = 0;
    return cudaDriverGetVersion(&version) == cudaSuccess && version >= 12030;
  }();
  if (!driver_takes_them) return false;
  int major = 0, sm_count = 0;
  return current_device(major, sm_count) && major >= 9;
#endif
}

// kernel<<<grid, block, shared, stream>>>(args...) in thread-block clusters of `cluster` blocks
// along x (1: none; the grid's x a multiple of it), as a programmatic dependent launch where the
// device takes one. The kernel must call start_after_previous_grid() (or wait_for_previous_grid())
// before it reads what the kernel ahead writes. Clusters need CUDA 12.3 here (else
// cudaErrorNotSupported) and a GPU of compute capability 9.0.
template <typename... Params, typename... Args>
cudaError_t launch_dependent_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                                     cudaStream_t stream, unsigned cluster, Args&&... args) {
  const bool dependent = dependent_launch_supported();
  if (!dependent && cluster <= 1) {
    kernel<<<grid, block, shared, stream>>>(std::forward<Args>(args)...);
    return cudaGetLastError();
  }
#if CUDART_VERSION >= 12030
  cudaLaunchAttribute attribute[2];
  unsigned attributes = 0;
  if (dependent) {
    attribute[attributes].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[attributes].val.programmaticStreamSerializationAllowed = 1;
    ++attributes;
  }
  if (cluster > 1) {
    attribute[attributes].id = cudaLaunchAttributeClusterDimension;
    attribute[attributes].val.clusterDim.x = cluster;
    attribute[attributes].val.clusterDim.y = 1;
    attribute[attributes].val.clusterDim.z = 1;
    ++attributes;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = attributes;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(std::forward<Args>(args))...);
#else
  return cudaErrorNotSupported;
#endif
}

// kernel<<<grid, block, shared, stream>>>(args...), as a programmatic dependent launch where the
// device takes one. The kernel must call start_after_previous_grid() (or wait_for_previous_grid())
// first.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                             Args&&... args) {
  return launch_dependent_cluster(kernel, grid, block, shared, stream, 1, std::forward<Args>(args)...);
}

}  // namespace turnrl::decoder_kernels
