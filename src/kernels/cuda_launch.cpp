#include "turnrl/kernels/cuda_launch.h"
#include "turnrl/kernels/hacking.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>

#include <cstdlib>
#include <memory>
#include <regex>
#include <sstream>

#include "turnrl/core/error.h"

namespace turnrl {
namespace {

// Removes // and /* */ comments so that a commented-out definition does not count.
std::string strip_comments(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "//") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (s.compare(i, 2, "/*") == 0) {
      const size_t end = s.find("*/", i + 2);
      i = end == std::string::npos ? s.size() : end + 2;
      out += ' ';
    } else {
      out += s[i++];
    }
  }
  return out;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

CudaCandidateForm cuda_candidate_form(const std::string& source) {
  static const std::regex launcher(R"(\bturnrl_launch\s*\()");
  return std::regex_search(strip_comments(source), launcher) ? CudaCandidateForm::launcher : CudaCandidateForm::kernel;
}

CudaLaunchShape parse_launch_shape(const std::string& source) {
  CudaLaunchShape shape;
  static const std::regex define(R"(^[ \t]*#[ \t]*define[ \t]+(TURNRL_[A-Z_]+)[ \t]+(.*?)[ \t\r]*$)");
  static const std::regex integer(R"(^\(?\s*([0-9]+)[uUlL]*\s*\)?$)");
  std::stringstream lines(strip_comments(source));
  for (std::string line; std::getline(lines, line);) {
    std::smatch d;
    if (!std::regex_match(line, d, define)) continue;
    const std::string name = d[1], value = d[2];
    int* field = name == "TURNRL_BLOCK_X"        ? &shape.block_x
                 : name == "TURNRL_BLOCK_Y"      ? &shape.block_y
                 : name == "TURNRL_TILE_X"       ? &shape.tile_x
                 : name == "TURNRL_TILE_Y"       ? &shape.tile_y
                 : name == "TURNRL_SHARED_BYTES" ? &shape.shared_bytes
                                                 : nullptr;
    if (!field) continue;  // the candidate's own macros may share the prefix
    std::smatch m;
    if (!std::regex_match(value, m, integer) || m[1].length() > 9)
      fail("{}: '{}' is not allowed; allowed: a decimal integer literal", name, value);
    *field = std::atoi(m[1].str().c_str());
  }
  const int64_t threads = int64_t(shape.block_x) * shape.block_y;
  if (shape.block_x < 1 || shape.block_y < 1 || threads > 1024)
    fail("TURNRL_BLOCK_X * TURNRL_BLOCK_Y: {} x {} is not allowed; allowed: 1 to 1024 threads per block", shape.block_x,
         shape.block_y);
  if (shape.tile_x < 1 || shape.tile_x > 4096 || shape.tile_y < 1 || shape.tile_y > 4096)
    fail("TURNRL_TILE_X / TURNRL_TILE_Y: {} / {} is not allowed; allowed: [1, 4096]", shape.tile_x, shape.tile_y);
  if (shape.shared_bytes < 0 || shape.shared_bytes > 227 * 1024)
    fail("TURNRL_SHARED_BYTES: {} is not allowed; allowed: [0, 232448]", shape.shared_bytes);
  return shape;
}

CudaGrid cuda_grid(const CudaTask& task, const std::vector<int64_t>& dims, const CudaLaunchShape& s) {
  require(!dims.empty(), "cuda_grid: the task has no dims");
  CudaGrid g;
  switch (task.grid) {
    case CudaGridKind::elementwise: {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      g.x = ceil_div(n, int64_t(s.block_x) * s.block_y * s.tile_x * s.tile_y);
      break;
    }
    case CudaGridKind::rows:
      g.x = ceil_div(dims[0], int64_t(s.block_y) * s.tile_y);
      break;
    case CudaGridKind::matrix:
      require(dims.size() >= 2, "cuda_grid: a matrix task needs dims M, N");
      g.x = ceil_div(dims[1], int64_t(s.block_x) * s.tile_x);
      g.y = ceil_div(dims[0], int64_t(s.block_y) * s.tile_y);
      break;
  }
  g.x = std::max<int64_t>(g.x, 1);
  g.y = std::max<int64_t>(g.y, 1);
  if (g.x > 2147483647 || g.y > 65535)
    fail("task '{}': the launch shape gives a grid of {} x {} blocks; allowed: x <= 2^31-1, y <= 65535 (raise "
         "TURNRL_TILE_X/Y)",
         task.name, g.x, g.y);
  return g;
}

std::vector<std::string> cuda_kernel_names(const std::string& source) {
  static const std::regex global(R"(__global__\b[^;{(]*?\b([A-Za-z_][A-Za-z0-9_]*)\s*\()");
  static const std::regex bounds(R"(__launch_bounds__\s*\([^)]*\))");
  std::vector<std::string> names;
  // Names in code only: a __global__ in a string literal or an #if 0 block is no kernel.
  const std::string text = std::regex_replace(code_text(source), bounds, " ");
  for (std::sregex_iterator it(text.begin(), text.end(), global), end; it != end; ++it) {
    const std::string n = (*it)[1];
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  return names;
}

bool is_own_kernel(const std::string& profiled, const std::vector<std::string>& own) {
  std::string name = profiled;
  if (profiled.rfind("_Z", 0) == 0) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(profiled.c_str(), nullptr, nullptr, &status), std::free);
    if (status == 0 && d) name = d.get();
  }
  // Demangled: "void ns::my_kernel<128>(float const*, int)" -> "my_kernel". The base name is the
  // identifier right before the template arguments or the parameter list.
  size_t end = name.find('(');
  if (end == std::string::npos) end = name.size();
  int depth = 0;
  size_t stop = end;
  for (size_t i = end; i-- > 0;) {  // skip a trailing template argument list
    if (name[i] == '>') ++depth;
    else if (name[i] == '<') {
      if (--depth == 0) { stop = i; break; }
    } else if (depth == 0) {
      break;
    }
  }
  size_t begin = stop;
  while (begin > 0 && (std::isalnum(static_cast<unsigned char>(name[begin - 1])) || name[begin - 1] == '_')) --begin;
  const std::string base = name.substr(begin, stop - begin);
  // Library kernels live in namespaces (at::native::, cutlass::, ...): those are never the
  // candidate's, whatever their base name. The candidate's own may sit in its own namespace.
  const std::string qualifier = name.substr(0, begin);
  for (const char* lib : {"at::", "c10::", "cutlass::", "cub::", "thrust::", "cublas", "cudnn", "cute::"})
    if (qualifier.find(lib) != std::string::npos) return false;
  return std::find(own.begin(), own.end(), base) != own.end();
}

}  // namespace turnrl
