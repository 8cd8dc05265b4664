// turnrl_nvrtc ARCH: compiles candidate.cu (a kernel-form CUDA candidate) in the working directory
// with NVRTC into candidate.obj (a cubin for ARCH, e.g. sm_90a), the compiler's messages on stdout.
// The CUDA evaluator runs it in the sandbox for every compile (src/kernels/cuda_compile.cpp), so
// the compiler never runs in a process that has loaded, or will load, candidate code. Exit status:
// 0 compiled, 1 not (the messages say why), 2 bad usage or an unreadable source.
#include <nvrtc.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: turnrl_nvrtc ARCH (compiles ./candidate.cu into ./candidate.obj)\n");
    return 2;
  }
  std::ifstream in("candidate.cu", std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "turnrl_nvrtc: cannot read candidate.cu\n");
    return 2;
  }
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nvrtcProgram program;
  if (nvrtcCreateProgram(&program, source.c_str(), "candidate.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) {
    std::printf("nvrtcCreateProgram failed\n");
    return 1;
  }
  const std::string arch = std::string("--gpu-architecture=") + argv[1];
  // No fast math: the precision check compares against float32 within 1e-4.
  const char* options[] = {arch.c_str(), "--std=c++17", "-lineinfo"};
  const nvrtcResult result = nvrtcCompileProgram(program, 3, options);
  size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(program, &log[0]);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  if (result != NVRTC_SUCCESS && log.empty()) log = nvrtcGetErrorString(result);
  if (!log.empty()) std::printf("%s\n", log.c_str());
  if (result != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&program);
    return 1;
  }
  size_t size = 0;
  nvrtcGetCUBINSize(program, &size);
  std::string cubin(size, '\0');
  nvrtcGetCUBIN(program, &cubin[0]);
  nvrtcDestroyProgram(&program);
  std::ofstream out("candidate.obj", std::ios::binary);
  out.write(cubin.data(), std::streamsize(cubin.size()));
  return out ? 0 : 2;
}
