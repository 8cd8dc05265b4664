#include "cuda_compile.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "turnrl/core/error.h"
#include "turnrl/core/hash.h"
#include "turnrl/kernels/cuda_launch.h"
#include "worker_round_trip.h"

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

SandboxLimits nvrtc_limits(const CudaCompiler& c) {
  SandboxLimits lim = compile_limits(c);
#ifdef TURNRL_CUDA_LIBRARY_DIR
  lim.visible(TURNRL_CUDA_LIBRARY_DIR);  // libnvrtc and the builtins it loads
#endif
  return lim;
}

CompileOutcome run_nvrtc(const CudaCompiler& c, const std::string& arch, const std::string& source,
                         const std::string& dir) {
  if (c.nvrtc_program.empty())
    return {false, "kernel-form candidates need turnrl_nvrtc, which this build does not have (no CUDA toolkit at build time)"};
  if (c.nvrtc_servers) return c.nvrtc_servers->compile(arch, source, dir, c.message_chars);
  const SandboxLimits lim = nvrtc_limits(c);
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

std::string encode_nvrtc_result(const NvrtcResult& result) {
  return fmt::format("{} {}\n", result.ok ? 1 : 0, result.log.size()) + result.log + result.object;
}

// A frame is "<ok 0|1> <log bytes>\n" + log + object.
NvrtcResult decode_nvrtc_result(const std::string& frame) {
  const size_t newline = frame.find('\n');
  int ok = -1;
  size_t log_bytes = 0;
  char end = 0;
  const std::string header = frame.substr(0, newline == std::string::npos ? 0 : newline);
  if (newline == std::string::npos || std::sscanf(header.c_str(), "%d %zu%c", &ok, &log_bytes, &end) != 2 ||
      (ok != 0 && ok != 1) || log_bytes > frame.size() - newline - 1)
    fail("turnrl_nvrtc --serve replied with a malformed frame ({} bytes)", frame.size());
  NvrtcResult r;
  r.ok = ok == 1;
  r.log = frame.substr(newline + 1, log_bytes);
  r.object = frame.substr(newline + 1 + log_bytes);
  if (r.ok && r.object.empty()) fail("turnrl_nvrtc --serve replied success without an object");
  return r;
}

NvrtcServers::NvrtcServers(std::string program, SandboxLimits limits, int calls_per_process)
    : program_(std::move(program)), limits_(std::move(limits)), calls_per_process_(calls_per_process) {}

std::unique_ptr<SandboxWorker> NvrtcServers::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      auto server = std::move(idle_.back());
      idle_.pop_back();
      return server;
    }
  }
  return std::make_unique<SandboxWorker>(program_, std::vector<std::string>{"--serve"}, limits_);
}

void NvrtcServers::release(std::unique_ptr<SandboxWorker> server) {
  if (server->calls_since_start() >= calls_per_process_) server->stop();
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(server));
}

int NvrtcServers::processes_started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return starts_;
}

CompileOutcome NvrtcServers::compile(const std::string& arch, const std::string& source, const std::string& dir,
                                     size_t message_chars) {
  std::unique_ptr<SandboxWorker> server = acquire();
  const int starts_before = server->starts();
  const SandboxReply reply = server->call(arch + "\n" + source);
  {
    std::lock_guard<std::mutex> lock(mu_);
    starts_ += server->starts() - starts_before;
  }
  CompileOutcome out;
  if (reply.status != SandboxStatus::ok) {
    // The same words as a one-shot compile's failure (compile_outcome). SandboxWorker has killed
    // the process; its next call starts a new one.
    out.log = trim_message("NVRTC " + reply.message + (reply.output_tail.empty() ? "" : "\n" + reply.output_tail),
                           message_chars);
  } else {
    try {
      const NvrtcResult r = decode_nvrtc_result(reply.payload);
      out.log = trim_message(r.log, message_chars);
      if (r.ok) {
        std::ofstream file(fs::path(dir) / "candidate.obj", std::ios::binary);
        file.write(r.object.data(), std::streamsize(r.object.size()));
        out.ok = bool(file);
        if (!out.ok) out.log = "cannot write the compiled object under " + dir;
      }
    } catch (const Error& e) {
      out.log = e.what();
      server->stop();
    }
  }
  release(std::move(server));
  return out;
}

std::shared_ptr<NvrtcServers> make_nvrtc_servers(const CudaCompiler& compiler) {
  if (compiler.nvrtc_program.empty()) return nullptr;
  return std::make_shared<NvrtcServers>(compiler.nvrtc_program, nvrtc_limits(compiler));
}

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
    return kernel ? run_nvrtc(compiler, arch, source, dir) : run_nvcc(compiler, arch, dir);
  });
}

}  // namespace turnrl::eval_detail
