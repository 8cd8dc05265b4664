#pragma once
// Internal to the CUDA backend: compiling candidates in the parent's sandbox into the parent's
// object cache (object_cache.h), so the workers that load and run candidates never write a
// compiled object: the cache is mounted read-only in them, and each object's hash is checked by
// the worker before it loads it. Compiles run outside the GPU's measurement lock, so several
// workers' compiles use the CPU cores in parallel.
//   kernel form    turnrl_nvrtc ARCH in the sandbox (NVRTC; the worker used to call it in-process)
//   launcher form  nvcc -O3 -std=c++17 -arch=ARCH -shared -Xcompiler -fPIC ... -lcublas in the sandbox
// A kernel form's launch shape (the TURNRL_* #defines) is checked before compiling: a refused
// shape is a compile error naming the #define, with no compiler run.
#include <memory>
#include <string>

#include "object_cache.h"
#include "turnrl/kernels/sandbox.h"

namespace turnrl::eval_detail {

struct CudaCompiler {
  std::string nvrtc_program;   // turnrl_nvrtc ("" when the toolkit was not found at build time)
  std::string nvcc;            // absolute path ("" when not found: launcher forms fail saying so)
  SandboxLimits limits;        // the backend's; wall and CPU time become `seconds`
  double seconds = 60;         // per compile
  size_t message_chars = 2000;
};

// The cache key of a candidate for a GPU architecture (e.g. sm_90a): source, architecture and
// form, so that one source compiled for two GPUs is two objects.
std::string cuda_cache_key(const std::string& source, const std::string& arch);

// The candidate's object from `cache`, compiled in the sandbox on a miss, hash-checked (verified).
CompiledCandidate compile_cuda_candidate(ObjectCache& cache, const CudaCompiler& compiler, const std::string& source,
                                    const std::string& arch);

// The object cache the CUDA backend uses under `dir` (candidate.cu -> candidate.obj).
inline std::unique_ptr<ObjectCache> make_cuda_object_cache(const std::string& dir) {
  return std::make_unique<ObjectCache>(dir, "candidate.cu", "candidate.obj", ".obj");
}

}  // namespace turnrl::eval_detail
