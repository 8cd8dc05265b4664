// turnrl_nvrtc: the CUDA evaluator's NVRTC compile of kernel-form candidates, always in the sandbox,
// so the compiler never runs in a process that has loaded, or will load, candidate code.
//
//   turnrl_nvrtc ARCH     compiles ./candidate.cu into ./candidate.obj (a cubin for ARCH, e.g.
//                         sm_90a), the compiler's messages on stdout. Exit status: 0 compiled,
//                         1 not (the messages say why), 2 bad usage or an unreadable source.
//   turnrl_nvrtc --serve  a compile server on the sandbox channel (src/kernels/cuda_compile.cpp):
//                         each request frame is "ARCH\n" + source, each reply frame is
//                         encode_nvrtc_result's (cuda_compile.h). One process serves many compiles
//                         because starting one costs far more than a compile: loading NVRTC and its
//                         builtins takes ~0.4 s, a small kernel compiles in ~25 ms once loaded.
#include <nvrtc.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "cuda_compile.h"
#include "turnrl/kernels/sandbox.h"

namespace {

turnrl::eval_detail::NvrtcResult compile(const std::string& arch, const std::string& source) {
  turnrl::eval_detail::NvrtcResult out;
  nvrtcProgram program;
  if (nvrtcCreateProgram(&program, source.c_str(), "candidate.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) {
    out.log = "nvrtcCreateProgram failed";
    return out;
  }
  const std::string arch_option = "--gpu-architecture=" + arch;
  // No fast math: the precision check compares against float32 within 1e-4.
  const char* options[] = {arch_option.c_str(), "--std=c++17", "-lineinfo"};
  const nvrtcResult result = nvrtcCompileProgram(program, 3, options);
  size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  out.log.assign(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(program, &out.log[0]);
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  if (result != NVRTC_SUCCESS && out.log.empty()) out.log = nvrtcGetErrorString(result);
  if (result == NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetCUBINSize(program, &size);
    out.object.assign(size, '\0');
    nvrtcGetCUBIN(program, &out.object[0]);
    out.ok = true;
  }
  nvrtcDestroyProgram(&program);
  return out;
}

int serve() {
  using namespace turnrl;
  sandbox_child::install_crash_reporter();
  sandbox_child::say_hello();
  std::string request;
  while (sandbox_child::read_request(request)) {
    sandbox_child::arm_cpu_limit();
    const size_t newline = request.find('\n');
    eval_detail::NvrtcResult result;
    if (newline == std::string::npos || newline == 0)
      result.log = "turnrl_nvrtc: a request is \"ARCH\\n\" followed by the source";
    else
      result = compile(request.substr(0, newline), request.substr(newline + 1));
    sandbox_child::write_reply(eval_detail::encode_nvrtc_result(result));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--serve") return serve();
  if (argc != 2) {
    std::fprintf(stderr, "usage: turnrl_nvrtc ARCH (compiles ./candidate.cu into ./candidate.obj) | turnrl_nvrtc --serve\n");
    return 2;
  }
  std::ifstream in("candidate.cu", std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "turnrl_nvrtc: cannot read candidate.cu\n");
    return 2;
  }
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const turnrl::eval_detail::NvrtcResult result = compile(argv[1], source);
  if (!result.log.empty()) std::printf("%s\n", result.log.c_str());
  if (!result.ok) return 1;
  std::ofstream out("candidate.obj", std::ios::binary);
  out.write(result.object.data(), std::streamsize(result.object.size()));
  return out ? 0 : 2;
}
