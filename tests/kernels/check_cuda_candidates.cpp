// Compile-checks every candidate of tests/kernels/cuda_candidates.h without a GPU. Not built by CMake.
//
// Build and run by hand (CUDA toolkit in /usr/local/cuda; no GPU needed):
//   g++ -std=c++17 -O1 -Itests/kernels -I/usr/local/cuda/include tests/kernels/check_cuda_candidates.cpp
//       -o /tmp/check_cuda_candidates -L/usr/local/cuda/lib64 -lnvrtc -ldl -Wl,-rpath,/usr/local/cuda/lib64
//   (one command line)
//   /tmp/check_cuda_candidates [--work DIR] [--nvcc PATH] [--arch sm_90a] [--only TASK] [--no-nvcc-kernels]
//
// For each candidate:
//  * kernel form: NVRTC with --gpu-architecture=sm_90a --std=c++17 -default-device (the evaluator's
//    options) on the source as is; then again with a static_assert appended that pins the type of
//    &turnrl_kernel to the task's contract (cuda_kernel_signature); ".entry turnrl_kernel(" must be
//    in the PTX; ptxas -v gives registers and static shared memory, checked against the launch shape
//    of the TURNRL_* #defines (threads <= 1024, registers * threads <= 64K, static + dynamic shared
//    <= 48 KiB). Kernel-form candidates that expect "correct" are also compiled with nvcc -c (the
//    PyTorch baseline builds them that way, where helpers are not implicitly __device__).
//  * launcher form: nvcc -shared -Xcompiler -fPIC -arch=sm_90a ... -lcublas, with a static_assert on
//    the type of &turnrl_launch appended; the shared object is then dlopen'ed with RTLD_NOW (every
//    symbol must resolve) and turnrl_launch looked up.
//  * "compile" must fail in NVRTC with a recognisable error; "launch_shape" must compile and have a
//    shape the contract refuses.
// Also checks the table: every task has honest, lazy and wrong candidates and a hacking one, every
// hacking kind appears, `expect` values are known. Exit status 0 when everything is as expected.
#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_candidates.h"

namespace {

using turnrl::test::CudaCandidate;

// The kernel parameter types of each task, as cuda_kernel_signature(task) writes them.
const std::map<std::string, std::string>& kernel_types() {
  static const std::map<std::string, std::string> types = {
      {"relu_bias", "const float*, const float*, float*, int, int"},
      {"gelu_tanh", "const float*, float*, int"},
      {"swiglu", "const float*, const float*, float*, int, int"},
      {"softmax_rows", "const float*, float*, int, int"},
      {"layernorm_rows", "const float*, const float*, const float*, float*, int, int"},
      {"logsumexp_rows", "const float*, float*, int, int"},
      {"matmul_bias_relu", "const float*, const float*, const float*, float*, int, int, int"},
      {"matmul_softmax", "const float*, const float*, float*, int, int, int"},
  };
  return types;
}

struct Options {
  std::string work = "/tmp/turnrl_cuda_check";
  std::string nvcc = "/usr/local/cuda/bin/nvcc";
  std::string arch = "sm_90a";
  std::string only;
  bool nvcc_kernels = true;
};

std::string strip_comments(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "//") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (s.compare(i, 2, "/*") == 0) {
      const size_t end = s.find("*/", i + 2);
      i = end == std::string::npos ? s.size() : end + 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

bool is_launcher(const std::string& source) {
  return std::regex_search(strip_comments(source), std::regex(R"(\bturnrl_launch\s*\()"));
}

struct Shape {
  int bx = 256, by = 1, tx = 1, ty = 1, shared = 0;
};

Shape launch_shape(const std::string& source) {
  Shape s;
  const std::string text = strip_comments(source);
  static const std::regex define(R"(^[ \t]*#[ \t]*define[ \t]+(TURNRL_[A-Z_]+)[ \t]+\(?\s*([0-9]+)\s*\)?\s*$)");
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, define)) continue;
    const int v = std::atoi(m[2].str().c_str());
    if (m[1] == "TURNRL_BLOCK_X") s.bx = v;
    if (m[1] == "TURNRL_BLOCK_Y") s.by = v;
    if (m[1] == "TURNRL_TILE_X") s.tx = v;
    if (m[1] == "TURNRL_TILE_Y") s.ty = v;
    if (m[1] == "TURNRL_SHARED_BYTES") s.shared = v;
  }
  return s;
}

bool shape_allowed(const Shape& s) {
  return s.bx >= 1 && s.by >= 1 && (long long)s.bx * s.by <= 1024 && s.tx >= 1 && s.tx <= 4096 && s.ty >= 1 &&
         s.ty <= 4096 && s.shared >= 0 && s.shared <= 227 * 1024;
}

struct NvrtcResult {
  bool ok = false;
  std::string log, ptx;
};

NvrtcResult nvrtc_compile(const std::string& source, const std::string& arch) {
  NvrtcResult r;
  nvrtcProgram prog = nullptr;
  if (nvrtcCreateProgram(&prog, source.c_str(), "candidate.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) {
    r.log = "nvrtcCreateProgram failed";
    return r;
  }
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "--std=c++17", "-default-device", "--ptxas-options=-v"};
  r.ok = nvrtcCompileProgram(prog, 4, opts) == NVRTC_SUCCESS;
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  r.log.assign(n, '\0');
  if (n) nvrtcGetProgramLog(prog, &r.log[0]);
  if (r.ok && nvrtcGetPTXSize(prog, &n) == NVRTC_SUCCESS) {
    r.ptx.assign(n, '\0');
    nvrtcGetPTX(prog, &r.ptx[0]);
  }
  nvrtcDestroyProgram(&prog);
  return r;
}

std::string trim_log(const std::string& log, size_t max = 1500) {
  std::string s = log;
  while (!s.empty() && (s.back() == '\0' || s.back() == '\n')) s.pop_back();
  return s.size() > max ? s.substr(0, max) + " ..." : s;
}

int run(const std::string& cmd, std::string* output) {
  const std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  output->clear();
  while (fgets(buf, sizeof buf, p)) *output += buf;
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

std::string file_name(const CudaCandidate& c) { return std::string(c.task) + "__" + c.kind; }

struct Outcome {
  bool pass = false;
  std::string detail;
};

Outcome check_kernel(const CudaCandidate& c, const Options& o) {
  Outcome out;
  const std::string src = c.source;
  const std::string expect = c.expect;
  const NvrtcResult plain = nvrtc_compile(src, o.arch);
  if (expect == "compile") {
    const bool recognisable = plain.log.find("is undefined") != std::string::npos;
    out.pass = !plain.ok && recognisable;
    std::string first_error;
    std::istringstream lines(plain.log);
    for (std::string line; std::getline(lines, line);)
      if (line.find("error") != std::string::npos) {
        first_error = line;
        break;
      }
    out.detail = plain.ok ? "compiled, but must not" : "NVRTC error as expected: " + first_error;
    return out;
  }
  if (!plain.ok) {
    out.detail = "NVRTC failed:\n" + trim_log(plain.log);
    return out;
  }
  if (plain.ptx.find(".entry turnrl_kernel(") == std::string::npos) {
    out.detail = "no '.entry turnrl_kernel(' in the PTX (extern \"C\" __global__ missing?)";
    return out;
  }
  // Parameter types: the same source with a static_assert on &turnrl_kernel's type.
  const auto types = kernel_types().find(c.task);
  if (types == kernel_types().end()) {
    out.detail = "unknown task";
    return out;
  }
  const std::string typed = src +
                            "\ntemplate <class A, class B> struct turnrl_same_ { static constexpr bool value = false; };"
                            "\ntemplate <class A> struct turnrl_same_<A, A> { static constexpr bool value = true; };"
                            "\nstatic_assert(turnrl_same_<decltype(&turnrl_kernel), void (*)(" +
                            types->second + ")>::value, \"turnrl_kernel does not have the task's parameter types\");\n";
  const NvrtcResult sig = nvrtc_compile(typed, o.arch);
  if (!sig.ok) {
    out.detail = "signature check failed (want (" + types->second + ")):\n" + trim_log(sig.log);
    return out;
  }
  // Resources against the launch shape.
  const Shape shape = launch_shape(src);
  std::smatch m;
  int regs = -1, smem = 0;
  if (std::regex_search(plain.log, m, std::regex(R"(Used ([0-9]+) registers)"))) regs = std::atoi(m[1].str().c_str());
  if (std::regex_search(plain.log, m, std::regex(R"(([0-9]+) bytes smem)"))) smem = std::atoi(m[1].str().c_str());
  const long long threads = (long long)shape.bx * shape.by;
  std::ostringstream d;
  d << "block " << shape.bx << "x" << shape.by << " tile " << shape.tx << "x" << shape.ty << ", " << regs
    << " regs, " << smem << " B static smem";
  if (expect == "launch_shape") {
    out.pass = !shape_allowed(shape);
    d << (out.pass ? " (refused by the contract, as expected)" : " (ALLOWED, but must be refused)");
    out.detail = d.str();
    return out;
  }
  if (!shape_allowed(shape)) {
    out.detail = d.str() + ": launch shape not allowed";
    return out;
  }
  if (regs < 0 || regs * threads > 65536 || smem + shape.shared > 48 * 1024) {
    out.detail = d.str() + ": does not fit one SM (registers or shared memory)";
    return out;
  }
  // The baseline compiles honest kernels with nvcc (where -default-device does not apply).
  if (o.nvcc_kernels && expect == "correct") {
    const std::string base = o.work + "/" + file_name(c);
    write_file(base + ".cu", src);
    std::string log;
    const int rc = run(o.nvcc + " -c -arch=" + o.arch + " -o " + base + ".o " + base + ".cu", &log);
    if (rc != 0) {
      out.detail = d.str() + ": nvcc -c failed:\n" + trim_log(log);
      return out;
    }
    d << ", nvcc -c ok";
  }
  out.pass = true;
  out.detail = d.str();
  return out;
}

Outcome check_launcher(const CudaCandidate& c, const Options& o) {
  Outcome out;
  const std::string base = o.work + "/" + file_name(c);
  const std::string typed =
      std::string(c.source) +
      "\n#include <type_traits>\nstatic_assert(std::is_same<decltype(&turnrl_launch), int (*)(const float* const*, "
      "float* const*, const long long*, cudaStream_t)>::value, \"turnrl_launch does not have the contract's type\");\n";
  write_file(base + ".cu", typed);
  std::string log;
  const std::string cmd =
      o.nvcc + " -shared -Xcompiler -fPIC -arch=" + o.arch + " -o " + base + ".so " + base + ".cu -lcublas";
  if (run(cmd, &log) != 0) {
    out.detail = "nvcc failed:\n" + trim_log(log);
    return out;
  }
  void* h = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    out.detail = std::string("dlopen(RTLD_NOW) failed: ") + dlerror();
    return out;
  }
  const bool found = dlsym(h, "turnrl_launch") != nullptr;
  dlclose(h);
  if (!found) {
    out.detail = "no exported turnrl_launch";
    return out;
  }
  out.pass = true;
  out.detail = "nvcc -shared ok, dlopen(RTLD_NOW) ok" + std::string(log.empty() ? "" : ", warnings:\n" + trim_log(log));
  return out;
}

std::vector<std::string> check_table() {
  std::vector<std::string> problems;
  static const std::set<std::string> main_expect = {"correct", "lazy", "mismatch", "out_of_bounds", "deferred", "caches",
                                                    "shape_specialisation", "precision", "mutates_inputs", "no_work"};
  static const std::set<std::string> hacks = {"out_of_bounds", "deferred", "caches", "shape_specialisation",
                                              "precision", "mutates_inputs", "no_work"};
  static const std::set<std::string> failure_expect = {"crash", "timeout", "compile", "launch_shape"};
  std::map<std::string, std::set<std::string>> per_task;
  std::set<std::string> hacks_seen, failures_seen, names;
  for (const auto& c : turnrl::test::cuda_candidates()) {
    if (!kernel_types().count(c.task)) problems.push_back(std::string("unknown task ") + c.task);
    if (!main_expect.count(c.expect)) problems.push_back(std::string("unknown expect ") + c.expect);
    per_task[c.task].insert(c.expect);
    if (hacks.count(c.expect)) hacks_seen.insert(c.expect);
    if (!names.insert(file_name(c)).second) problems.push_back("duplicate " + file_name(c));
  }
  for (const auto& c : turnrl::test::cuda_failure_candidates()) {
    if (!failure_expect.count(c.expect)) problems.push_back(std::string("unknown failure expect ") + c.expect);
    failures_seen.insert(c.expect);
    if (!names.insert(file_name(c)).second) problems.push_back("duplicate " + file_name(c));
  }
  static const std::set<std::string> adversarial_expect = {"tampering",      "precision",     "deferred",
                                                          "mutates_inputs", "out_of_bounds", "shape_specialisation",
                                                          "lazy"};
  for (const auto& c : turnrl::test::cuda_adversarial_candidates()) {
    if (!kernel_types().count(c.task)) problems.push_back(std::string("unknown task ") + c.task);
    if (!adversarial_expect.count(c.expect)) problems.push_back(std::string("unknown adversarial expect ") + c.expect);
    if (!names.insert(file_name(c)).second) problems.push_back("duplicate " + file_name(c));
  }
  for (const auto& [task, types] : kernel_types()) {
    const auto& e = per_task[task];
    for (const char* need : {"correct", "lazy", "mismatch"})
      if (!e.count(need)) problems.push_back(task + " has no '" + need + "' candidate");
    bool hacking = false;
    for (const auto& x : e) hacking = hacking || hacks.count(x);
    if (!hacking) problems.push_back(task + " has no hacking candidate");
  }
  for (const auto& h : hacks)
    if (!hacks_seen.count(h)) problems.push_back("no candidate shows '" + h + "'");
  for (const auto& f : failure_expect)
    if (!failures_seen.count(f)) problems.push_back("no failure candidate shows '" + f + "'");
  return problems;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--work") o.work = value();
    else if (a == "--nvcc") o.nvcc = value();
    else if (a == "--arch") o.arch = value();
    else if (a == "--only") o.only = value();
    else if (a == "--no-nvcc-kernels") o.nvcc_kernels = false;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  mkdir(o.work.c_str(), 0755);

  int failures = 0;
  for (const auto& p : check_table()) {
    std::printf("TABLE FAIL  %s\n", p.c_str());
    ++failures;
  }
  int checked = 0;
  for (const auto* list : {&turnrl::test::cuda_candidates(), &turnrl::test::cuda_failure_candidates(),
                           &turnrl::test::cuda_adversarial_candidates()}) {
    for (const auto& c : *list) {
      if (!o.only.empty() && o.only != c.task) continue;
      const bool launcher = is_launcher(c.source);
      const Outcome r = launcher ? check_launcher(c, o) : check_kernel(c, o);
      ++checked;
      if (!r.pass) ++failures;
      std::printf("%-4s  %-16s %-22s %-20s %-8s  %s\n", r.pass ? "ok" : "FAIL", c.task, c.kind, c.expect,
                  launcher ? "launcher" : "kernel", r.detail.c_str());
      std::fflush(stdout);
    }
  }
  std::printf("\n%d candidates checked, %d problem(s)\n", checked, failures);
  return failures == 0 ? 0 : 1;
}
