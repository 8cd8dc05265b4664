#include "cuda_compile.h"

#include <algorithm>
#include <filesystem>

#include "turnrl/core/error.h"
#include "turnrl/core/hash.h"
#include "turnrl/kernels/cuda_launch.h"

namespace turnrl::eval_detail {
namespace fs = std::filesystem;
namespace {

// The CUDA installation an nvcc belongs to (its bin/'s parent): headers, cuBLAS and NVRTC's
// libraries, all of which a compile in the sandbox needs to see.
std::string cuda_root(const std::string& program) { return fs::path(program).parent_path().parent_path().string(); }

SandboxLimits compile_limits(const CudaCompiler& c) {
  SandboxLimits lim = c.limits;
  lim.wall_seconds = lim.cpu_seconds = c.seconds;
  lim.address_space_bytes = std::max<int64_t>(lim.address_space_bytes, int64_t(16) << 30);
  lim.file_bytes = std::max<int64_t>(lim.file_bytes, int64_t(256) << 20);
  lim.scratch_bytes = std::max<int64_t>(lim.scratch_bytes, int64_t(1) << 30);  // nvcc's intermediate files
  lim.output_bytes = 64 << 10;
  return lim;
}

CompileOutcome run_nvrtc(const CudaCompiler& c, const std::string& arch, const std::string& dir) {
  if (c.nvrtc_program.empty())
    return {false, "kernel-form candidates need turnrl_nvrtc, which this build does not have (no CUDA toolkit at build time)"};
  SandboxLimits lim = compile_limits(c);
#ifdef TURNRL_CUDA_LIBRARY_DIR
  lim.visible(TURNRL_CUDA_LIBRARY_DIR);  // libnvrtc and the builtins it loads
#endif
  const CommandResult r = run_sandboxed(c.nvrtc_program, {arch}, lim, dir, {"candidate.cu"}, {"candidate.obj"});
  return compile_outcome(r, "NVRTC", {dir, kSandboxWorkDir}, c.message_chars);
}

CompileOutcome run_nvcc(const CudaCompiler& c, const std::string& arch, const std::string& dir) {
  if (c.nvcc.empty() || !fs::exists(c.nvcc))
    return {false, "launcher-form candidates need nvcc, which was not found (set CUDA_HOME or put nvcc on PATH)"};
  SandboxLimits lim = compile_limits(c);
  lim.visible(cuda_root(c.nvcc));
  lim.environment.push_back("PATH=" + fs::path(c.nvcc).parent_path().string() + ":/usr/bin:/bin");
  const std::vector<std::string> args = {"-O3", "-std=c++17", "-arch=" + arch, "-shared", "-Xcompiler", "-fPIC",
                                         "-lineinfo", "candidate.cu", "-o", "candidate.obj", "-lcublas", "-lcublasLt"};
  const CommandResult r = run_sandboxed(c.nvcc, args, lim, dir, {"candidate.cu"}, {"candidate.obj"});
  return compile_outcome(r, "nvcc", {dir, kSandboxWorkDir}, c.message_chars);
}

}  // namespace

std::string cuda_cache_key(const std::string& source, const std::string& arch) {
  const bool kernel = cuda_candidate_form(source) == CudaCandidateForm::kernel;
  return hex64(fnv1a64(source, fnv1a64(arch + (kernel ? "k2" : "l2"))));
}

CompiledCandidate compile_cuda_candidate(ObjectCache& cache, const CudaCompiler& compiler, const std::string& source,
                                    const std::string& arch) {
  const bool kernel = cuda_candidate_form(source) == CudaCandidateForm::kernel;
  if (kernel) {
    try {
      parse_launch_shape(source);
    } catch (const Error& e) {
      CompiledCandidate refused;
      refused.hash = cuda_cache_key(source, arch);
      refused.log = e.what();
      return refused;
    }
  }
  return cache.verified(cuda_cache_key(source, arch), source, [&](const std::string& dir) {
    return kernel ? run_nvrtc(compiler, arch, dir) : run_nvcc(compiler, arch, dir);
  });
}

}  // namespace turnrl::eval_detail
