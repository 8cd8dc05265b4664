#pragma once
// Internal to the CUDA backend: compiling candidates in the parent's sandbox into the parent's
// object cache (object_cache.h), so the workers that load and run candidates never write a
// compiled object: the cache is mounted read-only in them, and each object's hash is checked by
// the worker before it loads it. Compiles run outside the GPU's measurement lock, so several
// workers' compiles use the CPU cores in parallel.
//   kernel form    NVRTC in the sandbox: a pool of turnrl_nvrtc --serve processes (NvrtcServers)
//                  where the evaluator keeps one, else one turnrl_nvrtc ARCH process per compile
//   launcher form  nvcc -O3 -std=c++17 -arch=ARCH -shared -Xcompiler -fPIC ... -lcublas in the sandbox
// A kernel form's launch shape (the TURNRL_* #defines) is checked before compiling: a refused
// shape is a compile error naming the #define, with no compiler run.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "object_cache.h"
#include "turnrl/kernels/sandbox.h"

namespace turnrl::eval_detail {

// One NVRTC compile's outcome, as turnrl_nvrtc --serve replies it.
struct NvrtcResult {
  bool ok = false;
  std::string log;     // NVRTC's messages (warnings too when ok)
  std::string object;  // the cubin when ok
};
std::string encode_nvrtc_result(const NvrtcResult& result);
// Throws turnrl::Error on a frame that is not an encoded NvrtcResult.
NvrtcResult decode_nvrtc_result(const std::string& frame);

// Sandboxed turnrl_nvrtc --serve processes, started on demand, at most one per concurrent compile
// (so at most as many as the evaluator has threads). A compile that crashes or times out costs
// that compile only: SandboxWorker restarts its process on the next call. Each process serves
// `calls_per_process` compiles and is then replaced, so NVRTC's own state never grows without bound.
class NvrtcServers {
 public:
  NvrtcServers(std::string program, SandboxLimits limits, int calls_per_process = 500);
  // Compiles `source` for `arch`; on success writes the cubin to dir/candidate.obj.
  CompileOutcome compile(const std::string& arch, const std::string& source, const std::string& dir,
                         size_t message_chars);
  int processes_started() const;  // over the pool's life, restarts included

 private:
  std::unique_ptr<SandboxWorker> acquire();
  void release(std::unique_ptr<SandboxWorker> server);

  std::string program_;
  SandboxLimits limits_;
  int calls_per_process_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<SandboxWorker>> idle_;
  int starts_ = 0;
};

struct CudaCompiler {
  std::string nvrtc_program;   // turnrl_nvrtc ("" when the toolkit was not found at build time)
  std::shared_ptr<NvrtcServers> nvrtc_servers;  // kernel forms compile there when set (make_nvrtc_servers)
  std::string nvcc;            // absolute path ("" when not found: launcher forms fail saying so)
  SandboxLimits limits;        // the backend's; wall and CPU time become `seconds`
  double seconds = 60;         // per compile
  size_t message_chars = 2000;
};

// The compile servers for `compiler` (its program and limits); null without turnrl_nvrtc.
std::shared_ptr<NvrtcServers> make_nvrtc_servers(const CudaCompiler& compiler);

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
