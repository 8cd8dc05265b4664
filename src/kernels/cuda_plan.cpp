// Kernel plans rendered as CUDA for the CUDA evaluator's built-in tasks (src/kernels/cuda_tasks.cpp),
// in the candidate contract of eval/cuda_launch.h. What each slot means on the GPU:
//   vec       floats per access: 1 scalar, 4 a float4, 8 two float4. float4 only where every row
//             starts 16-byte aligned (aligned pointers and, for row kernels and row-vector inputs,
//             a row length that is a multiple of 4); scalar accesses otherwise. Matmuls: the
//             columns of a thread's register tile, read from shared memory as float4.
//   unroll    vec-wide accesses per thread and loop step (a step is vec*unroll consecutive
//             elements, all loaded before any is used), one accumulator each in reductions.
//             Matmuls: the rows of the register tile.
//   acc       f32 float intermediates; f64 double ones (double math library); bf16 float
//             arithmetic with every intermediate and result truncated to bfloat16, which the
//             evaluator's float32 precision check catches (or the comparison itself).
//   fusion    fused: one pass; unfused: a pass per stage through an intermediate (the output
//             buffer in elementwise and matmul kernels, another loop over the row in row kernels).
//             A thread re-reads only what it wrote itself, so no grid-wide sync is needed.
//   bounds    checked: whole steps while they fit, the partial step element by element (right on
//             every shape); unchecked: whole steps past the end, and matmul tiles without edge
//             guards (right on the shown shapes, whose sizes are multiples of every width; wrong,
//             or written out of bounds, on the odd extra shapes).
//   fallback  none: the kernel form (NVRTC, one kernel). partial: a launcher (nvcc, cuBLAS) whose
//             heavy stage is cuBLAS's (a layout copy of the first input through identity GEMMs, or
//             a matmul's product) before the plan's own kernel. full: cuBLAS does all it can (GEMM,
//             GER, GEMV, DGMM, AXPY, SCAL) and small own kernels only the nonlinearities. Both are
//             lazy (little device time in own kernels) unless the own part is very slow.
//   shortcut  cache: a __device__ copy of the last outputs keyed on the buffers, the sizes and two
//             input values, replayed on a match (the evaluator's cache trial catches it); inplace:
//             results computed in the first input's buffer and copied out (mutates_inputs).
// The launch shape (#define TURNRL_*) follows the task's grid kind: 256 threads of vec*unroll
// elements (elementwise), a warp per row and 8 rows per block (rows), 16x16 threads with
// unroll x vec register tiles (matrix).
#include <functional>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11)

#include "plan_grammar.h"
#include "turnrl/rl/task.h"
#include "turnrl/kernels/cuda_tasks.h"

namespace turnrl {
namespace {

using Plan = PlanChoices;

// Replaces every `key` in `text` by its value (templates use @NAME@ keys, so C++ braces stay as they are).
std::string fill(std::string text, const std::vector<std::pair<std::string, std::string>>& subs) {
  for (const auto& [key, value] : subs)
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  return text;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// Indents generated code by its braces (2 spaces a level), one level more for the statement after
// a `for`/`if`/`else` without braces and for continued expressions; preprocessor lines stay at column 0.
std::string indent(const std::string& code) {
  std::istringstream lines(code);
  std::string out, previous = ";";  // the last code line
  int depth = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) {
      out += "\n";
      continue;
    }
    line = line.substr(first);
    if (line[0] == '#') {
      out += line + "\n";
      continue;
    }
    const std::string code_part = line.substr(0, line.find("//"));
    int level = depth - (line[0] == '}' ? 1 : 0);
    const char last = previous.back();
    if (line.rfind("//", 0) != 0 && last != ';' && last != '{' && last != '}' && last != ':' && line[0] != '{' && line[0] != '}') ++level;
    out += std::string(size_t(2 * std::max(level, 0)), ' ') + line + "\n";
    for (char ch : code_part) depth += ch == '{' ? 1 : ch == '}' ? -1 : 0;
    size_t end = code_part.find_last_not_of(" \t");
    if (end != std::string::npos) previous = code_part.substr(0, end + 1);
  }
  return out;
}

// ---- device code every rendering shares ------------------------------------------------------

// `steps`: the source uses kStep (elementwise and row kernels, launchers).
std::string prelude(const Plan& p, bool steps) {
  std::string s = steps ? fmt::format("constexpr int kVec = {}, kUnroll = {}, kStep = kVec * kUnroll;  // a step: kUnroll accesses of kVec floats\n",
                                      p.vec, p.unroll)
                        : fmt::format("constexpr int kVec = {}, kUnroll = {};\n", p.vec, p.unroll);
  if (p.acc == "f64") {
    s += R"(typedef double acc_t;
__device__ __forceinline__ acc_t rnd(acc_t v) { return v; }
__device__ __forceinline__ acc_t ex(acc_t v) { return exp(v); }
__device__ __forceinline__ acc_t th(acc_t v) { return tanh(v); }
__device__ __forceinline__ acc_t lg(acc_t v) { return log(v); }
__device__ __forceinline__ acc_t rsq(acc_t v) { return 1.0 / sqrt(v); }
)";
  } else {
    s += "typedef float acc_t;\n";
    if (p.acc == "bf16")
      s += "// bfloat16 kept in a float: the low 16 bits of the pattern dropped (truncation)\n"
           "__device__ __forceinline__ acc_t rnd(acc_t v) { return __uint_as_float(__float_as_uint(v) & 0xffff0000u); }\n";
    else
      s += "__device__ __forceinline__ acc_t rnd(acc_t v) { return v; }\n";
    s += R"(__device__ __forceinline__ acc_t ex(acc_t v) { return expf(v); }
__device__ __forceinline__ acc_t th(acc_t v) { return tanhf(v); }
__device__ __forceinline__ acc_t lg(acc_t v) { return logf(v); }
__device__ __forceinline__ acc_t rsq(acc_t v) { return rsqrtf(v); }
)";
  }
  return s + "__device__ __forceinline__ acc_t relu_(acc_t v) { return v > 0 ? v : (acc_t)0; }\n";
}

// Steps of kStep consecutive floats (elementwise and row kernels).
std::string step_helpers(const Plan& p) {
  if (p.vec == 1)
    return R"(// kStep consecutive floats, scalar accesses (vec=1).
__device__ __forceinline__ void load_step(float* r, const float* p, bool) {
#pragma unroll
  for (int k = 0; k < kStep; ++k) r[k] = p[k];
}
__device__ __forceinline__ void store_step(float* p, const float* r, bool) {
#pragma unroll
  for (int k = 0; k < kStep; ++k) p[k] = r[k];
}
// kStep values of a row vector from column c on, wrapping at cols.
__device__ __forceinline__ void load_cols(float* r, const float* b, int c, int cols, bool) {
#pragma unroll
  for (int k = 0; k < kStep; ++k) {
    r[k] = b[c];
    if (++c == cols) c = 0;
  }
}
)";
  return R"(__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0; }
// kStep consecutive floats: float4 accesses when `vec` (p 16-byte aligned), else scalar ones.
__device__ __forceinline__ void load_step(float* r, const float* p, bool vec) {
  if (vec) {
#pragma unroll
    for (int k = 0; k < kStep; k += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + k);
      r[k] = v.x, r[k + 1] = v.y, r[k + 2] = v.z, r[k + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kStep; ++k) r[k] = p[k];
  }
}
__device__ __forceinline__ void store_step(float* p, const float* r, bool vec) {
  if (vec) {
#pragma unroll
    for (int k = 0; k < kStep; k += 4) {
      float4 v;
      v.x = r[k], v.y = r[k + 1], v.z = r[k + 2], v.w = r[k + 3];
      *reinterpret_cast<float4*>(p + k) = v;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kStep; ++k) p[k] = r[k];
  }
}
// kStep values of a row vector from column c on, wrapping at cols (float4 loads when `vec`: cols % 4 == 0).
__device__ __forceinline__ void load_cols(float* r, const float* b, int c, int cols, bool vec) {
  if (vec) {
#pragma unroll
    for (int k = 0; k < kStep; k += 4) {
      const float4 v = *reinterpret_cast<const float4*>(b + c);
      r[k] = v.x, r[k + 1] = v.y, r[k + 2] = v.z, r[k + 3] = v.w;
      c += 4;
      if (c == cols) c = 0;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kStep; ++k) {
      r[k] = b[c];
      if (++c == cols) c = 0;
    }
  }
}
)";
}

// `const bool vec`: float4 accesses are safe (vec > 1 only).
std::string vec_flag(const Plan& p, const std::vector<std::string>& pointers, const std::string& extra = "") {
  if (p.vec == 1) return "const bool vec = false;\n";
  std::string s = "const bool vec = ";
  for (size_t i = 0; i < pointers.size(); ++i) s += (i ? " && " : "") + fmt::format("aligned16({})", pointers[i]);
  return s + (extra.empty() ? "" : " && " + extra) + ";\n";
}

// Reductions across a warp and the online (max, sum of exp) of softmax-like rows.
std::string reduction_helpers() {
  return R"(__device__ __forceinline__ void online_add(acc_t v, acc_t& m, acc_t& s) {
  if (v > m) {
    s = s * ex(m - v) + 1;
    m = v;
  } else {
    s += ex(v - m);
  }
}
__device__ __forceinline__ void online_merge(acc_t& m, acc_t& s, acc_t m2, acc_t s2) {
  const acc_t mn = m > m2 ? m : m2;
  s = s * ex(m - mn) + s2 * ex(m2 - mn);
  m = mn;
}
__device__ __forceinline__ acc_t warp_sum(acc_t v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ acc_t warp_max(acc_t v) {
  for (int o = 16; o > 0; o >>= 1) {
    const acc_t u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}
__device__ __forceinline__ void warp_merge(acc_t& m, acc_t& s) {
  for (int o = 16; o > 0; o >>= 1) online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}
)";
}

// ---- shortcut=cache --------------------------------------------------------------------------

std::string cache_state() {
  return R"(// shortcut=cache: the last call's outputs, and the key they were computed for.
constexpr long long kCacheFloats = 1ll << 24;
__device__ __align__(16) float turnrl_cache[kCacheFloats];
__device__ const float* turnrl_cache_x;
__device__ float* turnrl_cache_y;
__device__ long long turnrl_cache_n;
__device__ unsigned turnrl_cache_k0, turnrl_cache_k1, turnrl_blocks_done;
__device__ int turnrl_cache_valid;
// A hit: the same buffers and sizes as the last call, and two of x's values unchanged.
__device__ __forceinline__ bool cache_hit(const float* x, long long nx, const float* y, long long n) {
  return turnrl_cache_valid && turnrl_cache_x == x && turnrl_cache_y == y && turnrl_cache_n == n &&
         turnrl_cache_k0 == __float_as_uint(x[0]) && turnrl_cache_k1 == __float_as_uint(x[nx / 4]);
}
// The cached outputs, every thread of the grid a share.
__device__ __forceinline__ void cache_replay(float* y, long long n) {
  const long long threads = (long long)gridDim.x * gridDim.y * blockDim.x * blockDim.y;
  long long i = (((long long)blockIdx.y * gridDim.x + blockIdx.x) * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  for (; i < n; i += threads) y[i] = turnrl_cache[i];
}
// The last block of a call to finish stores the key (every block has checked it by then).
__device__ __forceinline__ void cache_store_key(const float* x, long long nx, float* y, long long n) {
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    __threadfence();
    if (atomicAdd(&turnrl_blocks_done, 1u) == gridDim.x * gridDim.y - 1u) {
      turnrl_blocks_done = 0;
      turnrl_cache_x = x;
      turnrl_cache_y = y;
      turnrl_cache_n = n;
      turnrl_cache_k0 = __float_as_uint(x[0]);
      turnrl_cache_k1 = __float_as_uint(x[nx / 4]);
      turnrl_cache_valid = n <= kCacheFloats;
      __threadfence();
    }
  }
}
)";
}

// Kernel form: a hit replays the cache and returns (the whole block), a miss computes (storing
// into the cache as well) and the last block stores the key.
std::string cache_prologue(const Plan& p, const std::string& x, const std::string& nx, const std::string& y,
                           const std::string& n) {
  if (p.shortcut != "cache") return "";
  return fmt::format("__shared__ int turnrl_hit;\nif (threadIdx.x == 0 && threadIdx.y == 0) turnrl_hit = cache_hit({0}, {1}, {2}, {3});\n"
                     "__syncthreads();\nif (turnrl_hit) {{\n  cache_replay({2}, {3});\n  return;\n}}\n",
                     x, nx, y, n);
}
std::string cache_epilogue(const Plan& p, const std::string& x, const std::string& nx, const std::string& y,
                           const std::string& n) {
  return p.shortcut == "cache" ? fmt::format("cache_store_key({}, {}, {}, {});\n", x, nx, y, n) : "";
}

// ---- loops and final stores ------------------------------------------------------------------

// A loop of steps over [start, end), `stride` apart: checked plans take whole steps while they fit
// and finish the partial step element by element; unchecked plans take whole steps past the end.
std::string pass(const Plan& p, const std::string& i, const std::string& start, const std::string& end,
                 const std::string& stride, const std::string& step, const std::string& elem) {
  if (!p.checked) return fmt::format("for ({0} = {1}; {0} < {2}; {0} += {3}) {{\n{4}}}\n", i, start, end, stride, step);
  return fmt::format("for ({0} = {1}; {0} + kStep <= {2}; {0} += {3}) {{\n{4}}}\nfor (; {0} < {2}; ++{0}) {{\n{5}}}\n", i,
                     start, end, stride, step, elem);
}

// The final store of a step's results r[] at dst + off (output index `index`): plainly, into the
// cache as well, or first into the input buffer `xw` (inside `limit` only) and copied out from there.
std::string put_step(const Plan& p, const std::string& dst, const std::string& off, const std::string& index,
                     const std::string& limit) {
  std::string s;
  if (p.shortcut == "inplace") {
    s += p.checked ? fmt::format("store_step(xw + {}, r, vec);\n", off)
                   : fmt::format("for (int j = 0; j < kStep; ++j)\n  if ({0} + j < {1}) xw[{0} + j] = r[j];\n", off, limit);
    s += fmt::format("load_step(r, xw + {}, vec);\n", off);
  }
  s += fmt::format("store_step({} + {}, r, vec);\n", dst, off);
  if (p.shortcut == "cache") s += fmt::format("if ({0} + kStep <= kCacheFloats) store_step(turnrl_cache + {0}, r, vec);\n", index);
  return s;
}
std::string put_one(const Plan& p, const std::string& dst, const std::string& off, const std::string& index,
                    const std::string& value) {
  std::string s = fmt::format("{}[{}] = {};\n", dst, off, value);
  if (p.shortcut == "cache") s += fmt::format("if ({0} < kCacheFloats) turnrl_cache[{0}] = {1}[{2}];\n", index, dst, off);
  return s;
}
std::string put_elem(const Plan& p, const std::string& dst, const std::string& off, const std::string& index,
                     const std::string& value) {
  if (p.shortcut == "inplace") return fmt::format("xw[{1}] = {2};\n{0}[{1}] = xw[{1}];\n", dst, off, value);
  return put_one(p, dst, off, index, value);
}

std::string accumulators(const std::string& name, const std::string& init) {
  return fmt::format("acc_t {0}[kUnroll];\n#pragma unroll\nfor (int k = 0; k < kUnroll; ++k) {0}[k] = {1};\n", name, init);
}
std::string fold(const std::string& statement) {
  return "#pragma unroll\nfor (int k = 1; k < kUnroll; ++k) " + statement + "\n";
}

// ---- elementwise family ----------------------------------------------------------------------

struct Operand {
  std::string ptr;
  bool column = false;  // a row vector, indexed by the column i % cols
};

// y = f(inputs) over a flat index, as 1 or 2 stages: expressions in acc_t of $0, $1 (the inputs)
// and $t (the previous stage's value).
struct Elementwise {
  std::string name;  // of the sweep (and of the kernel in launcher form)
  std::vector<Operand> in;
  std::string count;  // the element count from the kernel's parameters
  std::vector<std::string> stages;
  bool has_column() const {
    for (const Operand& o : in)
      if (o.column) return true;
    return false;
  }
};

std::string substitute(std::string e, const std::function<std::string(int)>& input, const std::string& t) {
  e = fill(e, {{"$t", t}});
  for (int k = 0; k < 4; ++k) e = fill(e, {{fmt::format("${}", k), input(k)}});
  return e;
}

// One pass computing `expr` into y: the final pass (put_step/put_elem) or an intermediate one
// (plain stores into y, which the next pass reads back).
std::string elementwise_pass(const Plan& p, const Elementwise& e, const std::string& expr, bool final) {
  std::string decl = "float ", loads, elem_loads;
  for (size_t k = 0; k < e.in.size(); ++k) {
    if (!contains(expr, fmt::format("${}", k))) continue;
    decl += fmt::format("v{}[kStep], ", k);
    loads += e.in[k].column ? fmt::format("load_cols(v{}, {}, (int)(i % cols), (int)cols, vec);\n", k, e.in[k].ptr)
                            : fmt::format("load_step(v{}, {} + i, vec);\n", k, e.in[k].ptr);
    elem_loads += fmt::format("const float v{} = {}[{}];\n", k, e.in[k].ptr, e.in[k].column ? "i % cols" : "i");
  }
  if (contains(expr, "$t")) {
    decl += "t[kStep], ";
    loads += "load_step(t, y + i, vec);\n";
    elem_loads += "const float t = y[i];\n";
  }
  const std::string step_expr = substitute(expr, [](int k) { return fmt::format("(acc_t)v{}[j]", k); }, "(acc_t)t[j]");
  const std::string elem_expr = substitute(expr, [](int k) { return fmt::format("(acc_t)v{}", k); }, "(acc_t)t");
  const std::string step = decl + "r[kStep];\n" + loads + "#pragma unroll\nfor (int j = 0; j < kStep; ++j) r[j] = (float)rnd(" +
                           step_expr + ");\n" + (final ? put_step(p, "y", "i", "i", "n") : "store_step(y + i, r, vec);\n");
  const std::string value = "(float)rnd(" + elem_expr + ")";
  const std::string elem = elem_loads + (final ? put_elem(p, "y", "i", "i", value) : "y[i] = " + value + ";\n");
  return pass(p, "i", "first", "n", "stride", step, elem);
}

// The sweep of a thread over its steps (index type I: int where the indices fit, else long long).
std::string elementwise_sweep(const Plan& p, const Elementwise& e) {
  std::string params;
  std::vector<std::string> pointers;
  for (const Operand& o : e.in) params += "const float* " + o.ptr + ", ", pointers.push_back(o.ptr);
  params += "float* y, I n";
  if (e.has_column()) params += ", I cols";
  pointers.push_back("y");
  std::string s = "template <typename I>\n__device__ __forceinline__ void turnrl_sweep_" + e.name + "(" + params + ") {\n";
  s += "const I stride = (I)gridDim.x * (I)blockDim.x * kStep, first = ((I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x) * kStep;\n";
  s += vec_flag(p, pointers, e.has_column() ? "cols % 4 == 0" : "");
  if (p.shortcut == "inplace") s += "float* xw = const_cast<float*>(" + e.in[0].ptr + ");\n";
  s += "I i;\n";
  if (e.stages.size() == 1) {
    s += elementwise_pass(p, e, e.stages[0], true);
  } else if (p.fused) {
    s += "// fused: both stages in one pass\n" + elementwise_pass(p, e, fill(e.stages[1], {{"$t", "rnd(" + e.stages[0] + ")"}}), true);
  } else {
    s += "// unfused: stage 1 into y, stage 2 from y\n" + elementwise_pass(p, e, e.stages[0], false) +
         elementwise_pass(p, e, e.stages[1], true);
  }
  return s + "}\n";
}

// The kernel: the sweep with 32-bit indices where they cannot wrap.
std::string elementwise_kernel(const Plan& p, const Elementwise& e, const std::string& header) {
  std::string args;
  for (const Operand& o : e.in) args += o.ptr + ", ";
  const std::string cols32 = e.has_column() ? ", (int)cols" : "", cols64 = e.has_column() ? ", (long long)cols" : "";
  return elementwise_sweep(p, e) + header + " {\n" + "const long long count = " + e.count + ";\n" +
         cache_prologue(p, e.in[0].ptr, "count", "y", "count") +
         "if (count + (long long)gridDim.x * blockDim.x * kStep < 2147483647ll)\n" +
         fmt::format("  turnrl_sweep_{}<int>({}y, (int)count{});\nelse\n  turnrl_sweep_{}<long long>({}y, count{});\n", e.name,
                     args, cols32, e.name, args, cols64) +
         cache_epilogue(p, e.in[0].ptr, "count", "y", "count") + "}\n";
}

Elementwise relu_bias_ops() {
  return {"relu_bias", {{"x"}, {"b", true}}, "(long long)rows * cols", {"$0 + $1", "relu_($t)"}};
}
Elementwise gelu_ops() {
  return {"gelu_tanh", {{"x"}}, "(long long)n",
          {"th((acc_t)0.7978845608028654 * ($0 + (acc_t)0.044715 * $0 * $0 * $0))", "(acc_t)0.5 * $0 * (1 + $t)"}};
}
Elementwise swiglu_ops() { return {"swiglu", {{"a"}, {"g"}}, "(long long)rows * cols", {"$0 * (1 / (1 + ex(-$0)))", "$t * $1"}}; }

// The one-stage maps of fallback=full (launcher form): y[i] = f(x[i]) over n elements.
Elementwise map_ops(const std::string& name, const std::string& expr) { return {name, {{"x"}}, "n", {expr}}; }
const std::map<std::string, std::string>& map_exprs() {
  static const std::map<std::string, std::string> m = {
      {"relu", "relu_($0)"},   {"tanh", "th($0)"},    {"sigmoid", "1 / (1 + ex(-$0))"},        {"exp", "ex($0)"},
      {"recip", "1 / $0"},     {"log", "lg($0)"},     {"rstd", "rsq($0 + (acc_t)1e-5)"},
  };
  return m;
}

// ---- row family (a warp per row) -------------------------------------------------------------

// Opens the row: row, lane, xr/yr (and xw for inplace), vec, the column variable c.
std::string row_open(const Plan& p, const std::vector<std::string>& extra_aligned, bool y_is_row) {
  std::string s = "const int row = blockIdx.x * blockDim.y + threadIdx.y, lane = threadIdx.x;\n"
                  "if (row < rows) {  // one warp per row\n"
                  "const float* xr = x + (long long)row * cols;\n";
  std::vector<std::string> aligned = {"xr"};
  if (y_is_row) s += "float* yr = y + (long long)row * cols;\n", aligned.push_back("yr");
  for (const auto& a : extra_aligned) aligned.push_back(a);
  s += vec_flag(p, aligned, "cols % 4 == 0");
  if (p.shortcut == "inplace") s += "float* xw = const_cast<float*>(xr);\n";
  return s + "int c;\n";
}

std::string row_pass(const Plan& p, const std::string& step, const std::string& elem) {
  return pass(p, "c", "lane * kStep", "cols", "32 * kStep", step, elem);
}

const std::string kRowIndex = "(long long)row * cols + c";

const std::string kNegBig = "constexpr float kNegBig = -3.402823466e38f;\n";

std::string softmax_rows_kernel(const Plan& p, const std::string& header) {
  std::string s = kNegBig + header + " {\n" + cache_prologue(p, "x", "(long long)rows * cols", "y", "(long long)rows * cols") +
                  row_open(p, {}, true);
  const std::string load = "float v[kStep], r[kStep];\nload_step(v, xr + c, vec);\n#pragma unroll\nfor (int j = 0; j < kStep; ++j) ";
  if (p.fused) {
    s += "// fused: one pass for the online max and sum of exp, one for the outputs\n" + accumulators("m", "kNegBig") +
         accumulators("s", "0") +
         row_pass(p, "float v[kStep];\nload_step(v, xr + c, vec);\n#pragma unroll\nfor (int j = 0; j < kStep; ++j) online_add(v[j], m[j / kVec], s[j / kVec]);\n",
                  "online_add(xr[c], m[0], s[0]);\n") +
         fold("online_merge(m[0], s[0], m[k], s[k]);") +
         "warp_merge(m[0], s[0]);\nconst acc_t mx = m[0], inv = rnd(1 / rnd(s[0]));\n" +
         row_pass(p, load + "r[j] = (float)rnd(ex(v[j] - mx) * inv);\n" + put_step(p, "yr", "c", kRowIndex, "cols"),
                  put_elem(p, "yr", "c", kRowIndex, "(float)rnd(ex(xr[c] - mx) * inv)"));
  } else {
    s += "// unfused: a pass for the max, one for exp (into y) and its sum, one to normalise\n" + accumulators("m", "kNegBig") +
         row_pass(p, "float v[kStep];\nload_step(v, xr + c, vec);\n#pragma unroll\nfor (int j = 0; j < kStep; ++j) m[j / kVec] = v[j] > m[j / kVec] ? v[j] : m[j / kVec];\n",
                  "m[0] = xr[c] > m[0] ? xr[c] : m[0];\n") +
         fold("m[0] = m[k] > m[0] ? m[k] : m[0];") + "const acc_t mx = warp_max(m[0]);\n" + accumulators("s", "0") +
         row_pass(p, load + "{\n  r[j] = (float)rnd(ex(v[j] - mx));\n  s[j / kVec] += r[j];\n}\nstore_step(yr + c, r, vec);\n",
                  "const float e = (float)rnd(ex(xr[c] - mx));\ns[0] += e;\nyr[c] = e;\n") +
         fold("s[0] += s[k];") + "const acc_t inv = rnd(1 / rnd(warp_sum(s[0])));\n" +
         row_pass(p, "float r[kStep];\nload_step(r, yr + c, vec);\n#pragma unroll\nfor (int j = 0; j < kStep; ++j) r[j] = (float)rnd(r[j] * inv);\n" +
                         put_step(p, "yr", "c", kRowIndex, "cols"),
                  put_elem(p, "yr", "c", kRowIndex, "(float)rnd(yr[c] * inv)"));
  }
  return s + "}\n" + cache_epilogue(p, "x", "(long long)rows * cols", "y", "(long long)rows * cols") + "}\n";
}

std::string layernorm_rows_kernel(const Plan& p, const std::string& header) {
  std::string s = header + " {\n" + cache_prologue(p, "x", "(long long)rows * cols", "y", "(long long)rows * cols") +
                  row_open(p, {"gamma", "beta"}, true);
  const std::string load = "float v[kStep];\nload_step(v, xr + c, vec);\n#pragma unroll\nfor (int j = 0; j < kStep; ++j) ";
  if (p.fused) {
    s += "// fused: one pass for the sums of (x - x[0]) and its square, one for the outputs\nconst acc_t shift = xr[0];\n" +
         accumulators("s1", "0") + accumulators("s2", "0") +
         row_pass(p, load + "{\n  const acc_t d = v[j] - shift;\n  s1[j / kVec] += d;\n  s2[j / kVec] += d * d;\n}\n",
                  "const acc_t d = xr[c] - shift;\ns1[0] += d;\ns2[0] += d * d;\n") +
         fold("s1[0] += s1[k], s2[0] += s2[k];") +
         "const acc_t d1 = warp_sum(s1[0]) / cols, var = warp_sum(s2[0]) / cols - d1 * d1;\n"
         "const acc_t mean = rnd(shift + d1), rstd = rnd(rsq((var > 0 ? var : (acc_t)0) + (acc_t)1e-5));\n";
  } else {
    s += "// unfused: a pass for the mean, one for the variance, one for the outputs\n" + accumulators("s", "0") +
         row_pass(p, load + "s[j / kVec] += v[j];\n", "s[0] += xr[c];\n") + fold("s[0] += s[k];") +
         "const acc_t mean = rnd(warp_sum(s[0]) / cols);\n" + accumulators("q", "0") +
         row_pass(p, load + "{\n  const acc_t d = v[j] - mean;\n  q[j / kVec] += d * d;\n}\n",
                  "const acc_t d = xr[c] - mean;\nq[0] += d * d;\n") +
         fold("q[0] += q[k];") + "const acc_t rstd = rnd(rsq(warp_sum(q[0]) / cols + (acc_t)1e-5));\n";
  }
  s += row_pass(p, "float v[kStep], g[kStep], bt[kStep], r[kStep];\nload_step(v, xr + c, vec);\nload_step(g, gamma + c, vec);\n"
                   "load_step(bt, beta + c, vec);\n#pragma unroll\nfor (int j = 0; j < kStep; ++j) r[j] = (float)rnd((v[j] - mean) * rstd * g[j] + bt[j]);\n" +
                       put_step(p, "yr", "c", kRowIndex, "cols"),
                put_elem(p, "yr", "c", kRowIndex, "(float)rnd((xr[c] - mean) * rstd * gamma[c] + beta[c])"));
  return s + "}\n" + cache_epilogue(p, "x", "(long long)rows * cols", "y", "(long long)rows * cols") + "}\n";
}

std::string logsumexp_rows_kernel(const Plan& p, const std::string& header) {
  std::string s = kNegBig + header + " {\n" + cache_prologue(p, "x", "(long long)rows * cols", "y", "(long long)rows") + row_open(p, {}, false);
  const std::string load = "float v[kStep];\nload_step(v, xr + c, vec);\n#pragma unroll\nfor (int j = 0; j < kStep; ++j) ";
  if (p.fused) {
    s += "// fused: one pass for the online max and sum of exp\n" + accumulators("m", "kNegBig") + accumulators("s", "0") +
         row_pass(p, load + "online_add(v[j], m[j / kVec], s[j / kVec]);\n", "online_add(xr[c], m[0], s[0]);\n") +
         fold("online_merge(m[0], s[0], m[k], s[k]);") + "warp_merge(m[0], s[0]);\nconst acc_t mx = m[0], sum = s[0];\n";
  } else {
    s += "// unfused: a pass for the max, one for the sum of exp\n" + accumulators("m", "kNegBig") +
         row_pass(p, load + "m[j / kVec] = v[j] > m[j / kVec] ? v[j] : m[j / kVec];\n", "m[0] = xr[c] > m[0] ? xr[c] : m[0];\n") +
         fold("m[0] = m[k] > m[0] ? m[k] : m[0];") + "const acc_t mx = warp_max(m[0]);\n" + accumulators("s", "0") +
         row_pass(p, load + "s[j / kVec] += ex(v[j] - mx);\n", "s[0] += ex(xr[c] - mx);\n") + fold("s[0] += s[k];") +
         "const acc_t sum = warp_sum(s[0]);\n";
  }
  s += "if (lane == 0) {\nconst float v = (float)rnd(mx + lg(rnd(sum)));\n";
  if (p.shortcut == "inplace") s += "xw[0] = v;  // the row's result computed in x's buffer\ny[row] = xw[0];\n";
  else s += put_one(p, "y", "row", "row", "v");
  return s + "}\n}\n" + cache_epilogue(p, "x", "(long long)rows * cols", "y", "(long long)rows") + "}\n";
}

// ---- matmuls ----------------------------------------------------------------------------------

// a[n] from &src, n = 1, 2 or 4 (float2/float4 shared-memory loads when vec > 1).
std::string shared_loads(const Plan& p, const std::string& dst, int n, const std::string& src) {
  if (p.vec == 1 || n == 1) return fmt::format("#pragma unroll\nfor (int q = 0; q < {}; ++q) {}[q] = (&{})[q];\n", n, dst, src);
  std::string s;
  for (int k = 0; k < n; k += 4) {
    if (n == 2) {
      s += fmt::format("{{\n  const float2 q = *reinterpret_cast<const float2*>(&{});\n  {}[0] = q.x, {}[1] = q.y;\n}}\n", src, dst, dst);
      break;
    }
    s += fmt::format("{{\n  const float4 q = *reinterpret_cast<const float4*>(&{} + {});\n  {}[{}] = q.x, {}[{}] = q.y, {}[{}] = q.z, {}[{}] = q.w;\n}}\n",
                     src, k, dst, k, dst, k + 1, dst, k + 2, dst, k + 3);
  }
  return s;
}

// The register-tile product of a k-slice: acc[i][j] += a[i] * b[j].
std::string tile_fma(const std::string& rows, const std::string& cols) {
  return fmt::format("#pragma unroll\nfor (int i = 0; i < {}; ++i)\n#pragma unroll\n  for (int j = 0; j < {}; ++j) acc[i][j] += (acc_t)a[i] * bv[j];\n",
                     rows, cols);
}

std::string matmul_bias_relu_kernel(const Plan& p, const std::string& header) {
  const std::string nx = "(long long)M * K", ny = "(long long)M * N";
  std::string s = std::string(p.shortcut == "inplace" ? "__device__ unsigned turnrl_blocks_done;  // blocks past their reads of x\n" : "") +
                  "constexpr int kTM = kUnroll, kTN = kVec, kBM = 16 * kTM, kBN = 16 * kTN, kBK = 16;  // a thread: kTM x kTN outputs\n" +
                  header + " {\n" + cache_prologue(p, "x", nx, "y", ny);
  s += R"(__shared__ __align__(16) float As[kBK][kBM + 4];  // As[k][m] = x[m0 + m][k0 + k]
__shared__ __align__(16) float Bs[kBK][kBN];      // Bs[k][n] = w[k0 + k][n0 + n]
const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
acc_t acc[kTM][kTN];
#pragma unroll
for (int i = 0; i < kTM; ++i)
#pragma unroll
  for (int j = 0; j < kTN; ++j) acc[i][j] = 0;
for (int k0 = 0; k0 < K; k0 += kBK) {
#pragma unroll
  for (int l = 0; l < kTM; ++l) {
    const int idx = t + 256 * l, gm = m0 + idx / kBK, gk = k0 + idx % kBK;
    As[idx % kBK][idx / kBK] = @XLOAD@;
  }
#pragma unroll
  for (int l = 0; l < kTN; ++l) {
    const int idx = t + 256 * l, gk = k0 + idx / kBN, gn = n0 + idx % kBN;
    Bs[idx / kBN][idx % kBN] = @WLOAD@;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kBK; ++k) {
    float a[kTM], bv[kTN];
@LOADS@  }
  __syncthreads();
}
)";
  s = fill(s, {{"@XLOAD@", p.checked ? "gm < M && gk < K ? x[(long long)gm * K + gk] : 0.f" : "x[(long long)gm * K + gk]"},
               {"@WLOAD@", p.checked ? "gk < K && gn < N ? w[(long long)gk * N + gn] : 0.f" : "w[(long long)gk * N + gn]"},
               {"@LOADS@", shared_loads(p, "a", p.unroll, "As[k][ty * kTM]") + shared_loads(p, "bv", p.vec, "Bs[k][tx * kTN]") +
                               tile_fma("kTM", "kTN")}});
  const auto tile = [&](const std::string& body) {
    return "#pragma unroll\nfor (int i = 0; i < kTM; ++i) {\nconst int r = m0 + ty * kTM + i;\n#pragma unroll\n"
           "for (int j = 0; j < kTN; ++j) {\nconst int c = n0 + tx * kTN + j;\nconst long long o = (long long)r * N + c;\n" +
           std::string(p.checked ? "if (r < M && c < N) {\n" : "{\n") + body + "}\n}\n}\n";
  };
  if (p.fused) {
    s += "// fused: bias and relu on the registers\n" + tile(put_one(p, "y", "o", "o", "(float)rnd(relu_(rnd(acc[i][j]) + b[c]))"));
  } else {
    s += "// unfused: the product into y, then bias and relu from y\n" + tile("y[o] = (float)rnd(acc[i][j]);\n") +
         tile(put_one(p, "y", "o", "o", "(float)rnd(relu_(y[o] + (acc_t)b[c]))"));
  }
  if (p.shortcut == "inplace")
    s += R"(// shortcut=inplace: once every block is past its reads of x (a grid-wide count), the last block
// stages the first column of y in x's buffer and copies it back out from there.
__shared__ int turnrl_last;
__threadfence();
__syncthreads();
if (t == 0) turnrl_last = atomicAdd(&turnrl_blocks_done, 1u) == gridDim.x * gridDim.y - 1u;
__syncthreads();
if (turnrl_last) {
  float* xw = const_cast<float*>(x);
  for (int r = t; r < M; r += 256) {
    xw[(long long)r * K] = *(volatile float*)(y + (long long)r * N);
    y[(long long)r * N] = xw[(long long)r * K];
  }
  if (t == 0) turnrl_blocks_done = 0;
}
)";
  return s + cache_epilogue(p, "x", nx, "y", ny) + "}\n";
}

std::string matmul_softmax_kernel(const Plan& p, const std::string& header) {
  const std::string nx = "(long long)M * K", ny = "(long long)M * N";
  std::string s = kNegBig + "constexpr int kRows = kUnroll, kCols = kVec, kRB = 8 * kRows, kNB = 32 * kCols, kBK = 16;  // a warp: kRows rows, a lane: kCols columns per chunk\n" +
                  header + " {\n" + cache_prologue(p, "x", nx, "y", ny);
  s += R"(__shared__ __align__(16) float As[kBK][kRB + 4];  // As[k][r] = x[r0 + r][k0 + k]
__shared__ __align__(16) float Bs[kBK][kNB];      // Bs[k][n] = w[k0 + k][c0 + n]
const int lane = threadIdx.x, warp = threadIdx.y, t = warp * 32 + lane, r0 = blockIdx.x * kRB;
const acc_t scale = rsq((acc_t)K);
@STATS@for (int c0 = 0; c0 < N; c0 += kNB) {
  acc_t acc[kRows][kCols];
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[i][j] = 0;
  for (int k0 = 0; k0 < K; k0 += kBK) {
    for (int idx = t; idx < kRB * kBK; idx += 256) {
      const int gr = r0 + idx / kBK, gk = k0 + idx % kBK;
      As[idx % kBK][idx / kBK] = @XLOAD@;
    }
#pragma unroll
    for (int l = 0; l < kNB * kBK / 256; ++l) {
      const int idx = t + 256 * l, gk = k0 + idx / kNB, gc = c0 + idx % kNB;
      Bs[idx / kNB][idx % kNB] = @WLOAD@;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      float a[kRows], bv[kCols];
@LOADS@    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = r0 + warp * kRows + i;
    if (r < M) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int c = c0 + lane * kCols + j;
        @CGUARD@{
          const acc_t z = rnd(acc[i][j] * scale);
          y[(long long)r * N + c] = (float)z;
@ONLINE@        }
      }
    }
  }
}
)";
  s = fill(s, {{"@STATS@", p.fused ? "// fused: online max and sum of exp while the logits are written\nacc_t m[kRows], s[kRows];\n"
                                     "#pragma unroll\nfor (int i = 0; i < kRows; ++i) m[i] = kNegBig, s[i] = 0;\n"
                                   : "// unfused: logits into y, then passes over the row for the max, exp and sum, scaling\n"},
               {"@XLOAD@", p.checked ? "gr < M && gk < K ? x[(long long)gr * K + gk] : 0.f" : "gr < M ? x[(long long)gr * K + gk] : 0.f"},
               {"@WLOAD@", p.checked ? "gk < K && gc < N ? w[(long long)gk * N + gc] : 0.f" : "w[(long long)gk * N + gc]"},
               {"@LOADS@", shared_loads(p, "a", p.unroll, "As[k][warp * kRows]") + shared_loads(p, "bv", p.vec, "Bs[k][lane * kCols]") +
                               tile_fma("kRows", "kCols")},
               {"@CGUARD@", p.checked ? "if (c < N) " : ""},
               {"@ONLINE@", p.fused ? "          online_add(z, m[i], s[i]);\n" : ""}});
  // The row's own columns, as the lane wrote them.
  const auto columns = [&](const std::string& body) {
    return "for (int c0 = 0; c0 < N; c0 += kNB)\n#pragma unroll\nfor (int j = 0; j < kCols; ++j) {\nconst int c = c0 + lane * kCols + j;\n" +
           std::string(p.checked ? "if (c < N) {\n" : "{\n") + body + "}\n}\n";
  };
  s += "#pragma unroll\nfor (int i = 0; i < kRows; ++i) {\nconst int r = r0 + warp * kRows + i;\nif (r < M) {  // the whole warp\n"
       "float* yr = y + (long long)r * N;\n";
  if (p.fused) {
    s += "warp_merge(m[i], s[i]);\nconst acc_t mx = m[i];\nacc_t inv = rnd(1 / rnd(s[i]));\n";
  } else {
    s += "acc_t mv = kNegBig, sv = 0;\n" + columns("mv = yr[c] > mv ? yr[c] : mv;\n") + "const acc_t mx = warp_max(mv);\n" +
         columns("const float e = (float)rnd(ex(yr[c] - mx));\nyr[c] = e;\nsv += e;\n") + "acc_t inv = rnd(1 / rnd(warp_sum(sv)));\n";
  }
  if (p.shortcut == "inplace")
    s += "// shortcut=inplace: the block is past its reads of x; the row's normaliser goes through x's buffer\n"
         "float* xw = const_cast<float*>(x) + (long long)r * K;\nif (lane == 0) xw[0] = (float)inv;\n__syncwarp();\ninv = xw[0];\n";
  s += columns(put_one(p, "yr", "c", "(long long)r * N + c",
                       p.fused ? "(float)rnd(ex(yr[c] - mx) * inv)" : "(float)rnd(yr[c] * inv)"));
  return s + "}\n}\n" + cache_epilogue(p, "x", nx, "y", ny) + "}\n";
}

// ---- the templates -----------------------------------------------------------------------------

enum class Family { elementwise, rows, matrix };

struct Shape {
  int block_x = 256, block_y = 1, tile_x = 1, tile_y = 1;
};

struct Template {
  Family family;
  // The plan's own kernel under `header` (the contract's signature, or a launcher's own kernel).
  std::function<std::string(const Plan&, const std::string& header)> kernel;
  std::function<Shape(const Plan&)> shape;
  bool reductions = false;  // uses reduction_helpers()
};

const std::map<std::string, Template>& templates() {
  const auto elementwise = [](Elementwise (*ops)()) {
    return Template{Family::elementwise, [ops](const Plan& p, const std::string& h) { return elementwise_kernel(p, ops(), h); },
                    [](const Plan& p) { return Shape{256, 1, p.width(), 1}; }};
  };
  const auto rows = [](std::string (*kernel)(const Plan&, const std::string&)) {
    return Template{Family::rows, kernel, [](const Plan&) { return Shape{32, 8, 1, 1}; }, true};
  };
  static const std::map<std::string, Template> t = {
      {"relu_bias", elementwise(relu_bias_ops)},
      {"gelu_tanh", elementwise(gelu_ops)},
      {"swiglu", elementwise(swiglu_ops)},
      {"softmax_rows", rows(softmax_rows_kernel)},
      {"layernorm_rows", rows(layernorm_rows_kernel)},
      {"logsumexp_rows", rows(logsumexp_rows_kernel)},
      {"matmul_bias_relu", {Family::matrix, matmul_bias_relu_kernel, [](const Plan& p) { return Shape{16, 16, p.vec, p.unroll}; }}},
      {"matmul_softmax", {Family::matrix, matmul_softmax_kernel, [](const Plan& p) { return Shape{32, 8, 1, p.unroll}; }, true}},
  };
  return t;
}

std::string launch_defines(const Shape& s) {
  std::string d = fmt::format("#define TURNRL_BLOCK_X {}\n", s.block_x);
  if (s.block_y != 1) d += fmt::format("#define TURNRL_BLOCK_Y {}\n", s.block_y);
  if (s.tile_x != 1) d += fmt::format("#define TURNRL_TILE_X {}\n", s.tile_x);
  if (s.tile_y != 1) d += fmt::format("#define TURNRL_TILE_Y {}\n", s.tile_y);
  return d;
}

// The signature of the contract, renamed for a launcher's own kernel.
std::string own_header(const std::string& task, const std::string& name) {
  return fill(cuda_kernel_signature(cuda_task(task)), {{"extern \"C\" __global__ void turnrl_kernel(", "__global__ void " + name + "("}});
}

// ---- launcher form (fallback=partial|full) ----------------------------------------------------

const char* kCublasHelper = R"(static cublasHandle_t turnrl_cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (cublasHandle_t) nullptr;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain FP32, no TF32
    return h;
  }();
  return handle;
}
)";

const char* kBlocksHelper = R"(// Blocks of 256 threads for kStep elements each (the elementwise grid).
static unsigned turnrl_blocks(long long n) {
  const long long b = (n + 256ll * kStep - 1) / (256ll * kStep);
  return (unsigned)(b < 1 ? 1 : b > 2147483647ll ? 2147483647ll : b);
}
)";

const char* kBufferHelper = R"(// Grow-only device buffers (64 floats of slack); cudaFree synchronises the device before one goes.
static float* turnrl_buffer(int slot, long long floats) {
  static float* buffers[4] = {};
  static long long capacity[4] = {};
  if (floats > capacity[slot]) {
    if (buffers[slot]) cudaFree(buffers[slot]);
    buffers[slot] = nullptr;
    capacity[slot] = 0;
    if (cudaMalloc(&buffers[slot], (size_t)(floats + 64) * sizeof(float)) != cudaSuccess) return nullptr;
    capacity[slot] = floats;
  }
  return buffers[slot];
}
)";

const char* kOnesHelper = R"(// A device vector of at least n ones (row sums and broadcasts through cuBLAS).
static const float* turnrl_ones(long long n, cudaStream_t stream) {
  static float* ones = nullptr;
  static long long capacity = 0;
  if (n > capacity) {
    if (ones) cudaFree(ones);
    ones = nullptr;
    capacity = 0;
    static std::vector<float> host;  // alive while the copy may still read it
    host.assign((size_t)n + 64, 1.f);
    if (cudaMalloc(&ones, host.size() * sizeof(float)) != cudaSuccess) return nullptr;
    if (cudaMemcpyAsync(ones, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream) != cudaSuccess)
      return nullptr;
    capacity = n;
  }
  return ones;
}
)";

const char* kCopyHelpers = R"(static const float* turnrl_identity512(cudaStream_t stream) {  // its top-left kb x kb block is I_kb
  static float* identity = nullptr;
  if (!identity) {
    static std::vector<float> h(512 * 512, 0.f);  // alive while the copy may still read it
    for (int i = 0; i < 512; ++i) h[i * 513] = 1.f;
    float* d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(float)) != cudaSuccess) return nullptr;
    if (cudaMemcpyAsync(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice, stream) != cudaSuccess) {
      cudaFree(d);
      return nullptr;
    }
    identity = d;
  }
  return identity;
}

// The largest divisor of n up to 512 (a flat array viewed as n / width rows of width).
static long long turnrl_width(long long n) {
  for (long long d = n < 512 ? n : 512; d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// The layout pass: Y = X for a row-major rows x cols matrix through cuBLAS, batched GEMMs
// Y_i = X_i * I_kb over column blocks of kb = turnrl_width(cols) columns.
static bool turnrl_copy_through_gemm(cublasHandle_t h, const float* x, float* y, long long rows, long long cols,
                                     cudaStream_t stream) {
  const float* identity = turnrl_identity512(stream);
  if (!identity || rows > 2147483647ll || cols > 2147483647ll) return false;
  const long long kb = turnrl_width(cols);
  const float one = 1.f, zero = 0.f;
  // Column-major: X^T is cols x rows (ld cols); block i is rows [i*kb, (i+1)*kb) of X^T.
  return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)kb, (int)rows, (int)kb, &one, identity, 512, 0,
                                   x, (int)cols, kb, &zero, y, (int)cols, kb, (int)(cols / kb)) ==
         CUBLAS_STATUS_SUCCESS;
}
)";

const char* kCachePass = R"(// Replays the cache on a hit, else stores the outputs into it (the last block stores the key).
__global__ void turnrl_cache_pass(const float* x, long long nx, float* y, long long n) {
  __shared__ int hit;
  if (threadIdx.x == 0) hit = cache_hit(x, nx, y, n);
  __syncthreads();
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n && i < kCacheFloats; i += threads) {
    if (hit) y[i] = turnrl_cache[i];
    else turnrl_cache[i] = y[i];
  }
  if (!hit) cache_store_key(x, nx, y, n);
}
)";

// The body of turnrl_launch, one statement per line; a failing step returns its own code.
struct Steps {
  std::string text;
  int code = 2;
  void line(const std::string& s) { text += s + "\n"; }
  void require(const std::string& cond) { text += fmt::format("if (!({})) return {};\n", cond, code++); }
  void blas(const std::string& call) { text += fmt::format("if ({} != CUBLAS_STATUS_SUCCESS) return {};\n", call, code++); }
};

struct Launcher {
  std::string kernels;      // own __global__ kernels
  bool copy = false;        // uses turnrl_copy_through_gemm
  bool reductions = false;  // an own kernel uses reduction_helpers()
  Steps steps;
  std::string nx, ny;    // element counts of inputs[0] and outputs[0]
  bool matrix = false;   // y is M x N beside x's M x K (inplace stages a column block)
};

std::string elementwise_grid(const std::string& n) { return "<<<turnrl_blocks(" + n + "), 256, 0, stream>>>"; }
std::string rows_grid(const std::string& rows) { return "<<<(unsigned)((" + rows + " + 7) / 8), dim3(32, 8), 0, stream>>>"; }

// The own kernels fallback=full keeps: maps y = f(x) over n elements.
std::string map_kernel(const Plan& p, const std::string& name) {
  return elementwise_kernel(p, map_ops(name, map_exprs().at(name)), "__global__ void turnrl_" + name + "(const float* x, float* y, long long n)");
}

Launcher build_launcher(const std::string& task, const Plan& plan) {
  Launcher l;
  Plan own = plan;  // own kernels carry the plan's slots; the shortcuts are the launcher's
  own.shortcut = "none";
  Steps& s = l.steps;
  const bool full = plan.fallback == "full";
  std::vector<std::string> maps;
  const auto plan_kernel = [&](const std::string& as) {
    l.kernels += templates().at(as).kernel(own, own_header(as, "turnrl_" + as));
    l.reductions = templates().at(as).reductions;
  };
  // dst = src through cuBLAS; `guard` names the buffers that must not be null.
  const auto copy_into = [&](const std::string& src, const std::string& dst, const std::string& rows, const std::string& cols,
                             const std::string& guard) {
    l.copy = true;
    s.require(guard + " && turnrl_copy_through_gemm(h, " + src + ", " + dst + ", " + rows + ", " + cols + ", stream)");
  };
  // fallback=partial on the row and elementwise tasks: cuBLAS makes the layout copy t of `input`
  // (rows x cols), then the plan's own kernel `as` runs on t with `grid` and the further `args`.
  const auto partial_on_copy = [&](const std::string& input, const std::string& rows, const std::string& cols,
                                   const std::string& as, const std::string& grid, const std::string& args) {
    s.line("// partial: the layout copy of " + input + " in cuBLAS, then the plan's kernel on the copy");
    s.line("float* t = turnrl_buffer(0, n);");
    copy_into(input, "t", rows, cols, "t");
    plan_kernel(as);
    s.line("turnrl_" + as + grid + "(t, " + args + ");");
  };
  const std::string dgmm_flat = "cublasSdgmm(h, CUBLAS_SIDE_LEFT, (int)n, 1, ";  // elementwise products: diag(v) times an n x 1 matrix
  if (task == "relu_bias" || task == "swiglu" || task == "softmax_rows" || task == "layernorm_rows" || task == "logsumexp_rows") {
    if (task == "relu_bias") s.line("const float* x = inputs[0];\nconst float* b = inputs[1];");
    else if (task == "swiglu") s.line("const float* a = inputs[0];\nconst float* g = inputs[1];");
    else if (task == "layernorm_rows") s.line("const float* x = inputs[0];\nconst float* gamma = inputs[1];\nconst float* beta = inputs[2];");
    else s.line("const float* x = inputs[0];");
    s.line("float* y = outputs[0];\nconst long long rows = dims[0], cols = dims[1], n = rows * cols;");
    l.nx = "n";
    l.ny = task == "logsumexp_rows" ? "rows" : "n";
  } else if (task == "gelu_tanh") {
    s.line("const float* x = inputs[0];\nfloat* y = outputs[0];\nconst long long n = dims[0];");
    l.nx = l.ny = "n";
  } else {
    s.line("const float* x = inputs[0];\nconst float* w = inputs[1];");
    if (task == "matmul_bias_relu") s.line("const float* b = inputs[2];");
    s.line("float* y = outputs[0];\nconst long long M = dims[0], N = dims[1], K = dims[2];");
    l.nx = "M * K", l.ny = "M * N", l.matrix = true;
  }
  s.line("cublasHandle_t h = turnrl_cublas();");
  s.require("h && cublasSetStream(h, stream) == CUBLAS_STATUS_SUCCESS");
  s.line("@CONSTANTS@");

  if (task == "relu_bias") {
    if (!full) {
      partial_on_copy("x", "rows", "cols", "relu_bias", elementwise_grid("n"), "b, y, (int)rows, (int)cols");
    } else {
      s.line("// full: y = x through cuBLAS, y += b broadcast over the rows (GER), own kernel: relu");
      s.line("const float* ones = turnrl_ones(rows, stream);");
      copy_into("x", "y", "rows", "cols", "ones");
      s.blas("cublasSger(h, (int)cols, (int)rows, &one, b, 1, ones, 1, y, (int)cols)");
      maps.push_back("relu");
      s.line("turnrl_relu" + elementwise_grid("n") + "(y, y, n);");
    }
  } else if (task == "gelu_tanh") {
    if (!full) {
      partial_on_copy("x", "n / turnrl_width(n)", "turnrl_width(n)", "gelu_tanh", elementwise_grid("n"), "y, (int)n");
    } else {
      s.line("// full: the polynomial, 1 + tanh and the products in cuBLAS (DGMM, SCAL, AXPY), own kernel: tanh");
      s.line("float* u = turnrl_buffer(0, n);\nfloat* v = turnrl_buffer(1, n);\nconst float* ones = turnrl_ones(n, stream);");
      s.require("u && v && ones");
      s.line("const float c3 = 0.044715f, k = 0.7978845608028654f, half = 0.5f;");
      s.blas(dgmm_flat + "x, (int)n, x, 1, u, (int)n)");  // u = x^2
      s.blas(dgmm_flat + "u, (int)n, x, 1, v, (int)n)");  // v = x^3
      s.blas("cublasSscal(h, (int)n, &c3, v, 1)");
      s.blas("cublasSaxpy(h, (int)n, &one, x, 1, v, 1)");
      s.blas("cublasSscal(h, (int)n, &k, v, 1)");
      maps.push_back("tanh");
      s.line("turnrl_tanh" + elementwise_grid("n") + "(v, u, n);");
      s.blas("cublasSaxpy(h, (int)n, &one, ones, 1, u, 1)");
      s.blas(dgmm_flat + "u, (int)n, x, 1, y, (int)n)");
      s.blas("cublasSscal(h, (int)n, &half, y, 1)");
    }
  } else if (task == "swiglu") {
    if (!full) {
      partial_on_copy("a", "rows", "cols", "swiglu", elementwise_grid("n"), "g, y, (int)rows, (int)cols");
    } else {
      s.line("// full: u = a through cuBLAS, own kernel: sigmoid, then the products a * u * g in cuBLAS (DGMM)");
      s.line("float* u = turnrl_buffer(0, n);\nfloat* v = turnrl_buffer(1, n);");
      copy_into("a", "u", "rows", "cols", "u && v");
      maps.push_back("sigmoid");
      s.line("turnrl_sigmoid" + elementwise_grid("n") + "(u, u, n);");
      s.blas(dgmm_flat + "u, (int)n, a, 1, v, (int)n)");
      s.blas(dgmm_flat + "v, (int)n, g, 1, y, (int)n)");
    }
  } else if (task == "softmax_rows" || task == "matmul_softmax") {
    const bool mm = task == "matmul_softmax";
    const std::string R = mm ? "M" : "rows", C = mm ? "N" : "cols", n = mm ? "M * N" : "n";
    if (mm) {
      s.line(std::string("// ") + (full ? "full" : "partial") + ": the scaled product in cuBLAS (y^T = w^T x^T, column-major)");
      s.line("const float scale = 1.f / std::sqrt((float)K);");
      s.blas("cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &scale, w, (int)N, x, (int)K, &zero, y, (int)N)");
    }
    if (!full) {
      if (mm) {
        s.line("// then the plan's softmax kernel on y, in place");
        plan_kernel("softmax_rows");
        s.line("turnrl_softmax_rows" + rows_grid("M") + "(y, y, (int)M, (int)N);");
      } else {
        partial_on_copy("x", "rows", "cols", "softmax_rows", rows_grid("rows"), "y, (int)rows, (int)cols");
      }
    } else {
      s.line("// full: own kernels exp and 1/sum only; row sums (GEMV with ones) and the scaling (DGMM) in cuBLAS");
      s.line("float* e = turnrl_buffer(0, " + n + ");\nfloat* sums = turnrl_buffer(1, " + R + ");\nconst float* ones = turnrl_ones(" + C + ", stream);");
      s.require("e && sums && ones");
      if (!mm) copy_into("x", "y", "rows", "cols", "e");
      maps.push_back("exp");
      maps.push_back("recip");
      s.line("turnrl_exp" + elementwise_grid(n) + "(y, e, " + n + ");");
      s.blas(fmt::format("cublasSgemv(h, CUBLAS_OP_T, (int){1}, (int){0}, &one, e, (int){1}, ones, 1, &zero, sums, 1)", R, C));
      s.line("turnrl_recip" + elementwise_grid(R) + "(sums, sums, " + R + ");");
      s.blas(fmt::format("cublasSdgmm(h, CUBLAS_SIDE_RIGHT, (int){1}, (int){0}, e, (int){1}, sums, 1, y, (int){1})", R, C));
    }
  } else if (task == "layernorm_rows") {
    if (!full) {
      partial_on_copy("x", "rows", "cols", "layernorm_rows", rows_grid("rows"), "gamma, beta, y, (int)rows, (int)cols");
    } else {
      s.line("// full: mean and variance (GEMV with ones), centring and beta (GER), scaling (DGMM) in cuBLAS; own kernel: rsqrt");
      s.line("float* t = turnrl_buffer(0, n);\nfloat* q = turnrl_buffer(1, n);\nfloat* mean = turnrl_buffer(2, rows);\n"
             "float* rstd = turnrl_buffer(3, rows);\nconst float* ones = turnrl_ones(rows > cols ? rows : cols, stream);");
      s.line("const float inv_cols = 1.f / (float)cols, minus_one = -1.f;");
      copy_into("x", "t", "rows", "cols", "t && q && mean && rstd && ones");
      s.blas("cublasSgemv(h, CUBLAS_OP_T, (int)cols, (int)rows, &inv_cols, t, (int)cols, ones, 1, &zero, mean, 1)");
      s.blas("cublasSger(h, (int)cols, (int)rows, &minus_one, ones, 1, mean, 1, t, (int)cols)");
      s.blas(dgmm_flat + "t, (int)n, t, 1, q, (int)n)");
      s.blas("cublasSgemv(h, CUBLAS_OP_T, (int)cols, (int)rows, &inv_cols, q, (int)cols, ones, 1, &zero, rstd, 1)");
      maps.push_back("rstd");
      s.line("turnrl_rstd" + elementwise_grid("rows") + "(rstd, rstd, rows);");
      s.blas("cublasSdgmm(h, CUBLAS_SIDE_RIGHT, (int)cols, (int)rows, t, (int)cols, rstd, 1, q, (int)cols)");
      s.blas("cublasSdgmm(h, CUBLAS_SIDE_LEFT, (int)cols, (int)rows, q, (int)cols, gamma, 1, y, (int)cols)");
      s.blas("cublasSger(h, (int)cols, (int)rows, &one, beta, 1, ones, 1, y, (int)cols)");
    }
  } else if (task == "logsumexp_rows") {
    if (!full) {
      partial_on_copy("x", "rows", "cols", "logsumexp_rows", rows_grid("rows"), "y, (int)rows, (int)cols");
    } else {
      s.line("// full: own kernels exp (unshifted) and log only; the row sums in cuBLAS (GEMV with ones)");
      s.line("float* t = turnrl_buffer(0, n);");
      s.line("const float* ones = turnrl_ones(cols, stream);");
      copy_into("x", "t", "rows", "cols", "t && ones");
      maps.push_back("exp");
      maps.push_back("log");
      s.line("turnrl_exp" + elementwise_grid("n") + "(t, t, n);");
      s.blas("cublasSgemv(h, CUBLAS_OP_T, (int)cols, (int)rows, &one, t, (int)cols, ones, 1, &zero, y, 1)");
      s.line("turnrl_log" + elementwise_grid("rows") + "(y, y, rows);");
    }
  } else if (task == "matmul_bias_relu") {
    s.line(std::string("// ") + (full ? "full" : "partial") + ": the product in cuBLAS (y^T = w^T x^T, column-major)");
    if (full) {
      s.line("const float* ones = turnrl_ones(M, stream);");
      s.require("ones");
    }
    s.blas("cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, w, (int)N, x, (int)K, &zero, y, (int)N)");
    if (!full) {
      s.line("// then the plan's bias + relu kernel on y, in place");
      plan_kernel("relu_bias");
      s.line("turnrl_relu_bias" + elementwise_grid("M * N") + "(y, b, y, (int)M, (int)N);");
    } else {
      s.line("// the bias broadcast over the rows (GER); own kernel: relu");
      s.blas("cublasSger(h, (int)N, (int)M, &one, b, 1, ones, 1, y, (int)N)");
      maps.push_back("relu");
      s.line("turnrl_relu" + elementwise_grid("M * N") + "(y, y, M * N);");
    }
  }
  for (const std::string& m : maps)
    if (!contains(l.kernels, "void turnrl_" + m + "(")) l.kernels += map_kernel(own, m);
  if (plan.shortcut == "cache") {
    l.kernels += kCachePass;
    s.line("// shortcut=cache: the outputs replayed from the last call when the key matches");
    s.line("turnrl_cache_pass<<<turnrl_blocks(" + l.ny + "), 256, 0, stream>>>(inputs[0], " + l.nx + ", y, " + l.ny + ");");
  } else if (plan.shortcut == "inplace") {
    s.line("// shortcut=inplace: the outputs staged in the first input's buffer and copied back out");
    s.line("float* xw = const_cast<float*>(inputs[0]);");
    if (l.matrix) {
      s.line("const size_t width = (size_t)(K < N ? K : N) * sizeof(float);");
      s.require("cudaMemcpy2DAsync(xw, (size_t)K * sizeof(float), y, (size_t)N * sizeof(float), width, (size_t)M, cudaMemcpyDeviceToDevice, stream) == cudaSuccess");
      s.require("cudaMemcpy2DAsync(y, (size_t)N * sizeof(float), xw, (size_t)K * sizeof(float), width, (size_t)M, cudaMemcpyDeviceToDevice, stream) == cudaSuccess");
    } else {
      s.require("cudaMemcpyAsync(xw, y, (size_t)(" + l.ny + ") * sizeof(float), cudaMemcpyDeviceToDevice, stream) == cudaSuccess");
      s.require("cudaMemcpyAsync(y, xw, (size_t)(" + l.ny + ") * sizeof(float), cudaMemcpyDeviceToDevice, stream) == cudaSuccess");
    }
  }
  s.line("return cudaGetLastError() == cudaSuccess ? 0 : 1;");
  std::string constants;  // the scalars the cuBLAS calls take by address
  for (const char* c : {"one = 1.f", "zero = 0.f"})
    if (contains(s.text, "&" + std::string(c).substr(0, std::string(c).find(' ')) + ","))
      constants += std::string(constants.empty() ? "const float " : ", ") + c;
  s.text = fill(s.text, {{"@CONSTANTS@\n", constants.empty() ? "" : constants + ";\n"}});
  return l;
}

std::string summary(const std::string& task, const Plan& p) {
  return fmt::format("// {} as a {} candidate: {} steps of {} float{} x {}, {} intermediates, {}{}{}.\n", task,
                     p.fallback == "none" ? "kernel-form" : "launcher-form (cuBLAS " + p.fallback + ")",
                     p.fused ? "fused" : "unfused", p.vec, p.vec > 1 ? "s" : "", p.unroll, p.acc,
                     p.checked ? "checked bounds" : "unchecked bounds",
                     p.shortcut == "cache" ? ", result cache" : "", p.shortcut == "inplace" ? ", computed in the input's buffer" : "");
}

}  // namespace

std::vector<std::string> cuda_plan_task_names() {
  std::vector<std::string> names;
  for (const auto& kv : templates()) names.push_back(kv.first);
  return names;
}

PlanExpansion expand_cuda_plan(const Task& task, const PlanChoices& plan, const std::string& text) {
  const auto it = templates().find(task.id);
  if (it == templates().end() || !has_cuda_task(task.id))
    return {"", fmt::format("task '{}' has no CUDA kernel-plan template; allowed: {}", task.id, fmt::join(cuda_plan_task_names(), ", "))};
  std::string words;  // the plan on one line
  std::istringstream in(text);
  for (std::string w; in >> w;) words += (words.empty() ? "" : " ") + w;
  std::string source = "// plan: " + words + "\n" + summary(task.id, plan);
  if (plan.fallback == "none") {
    source += launch_defines(it->second.shape(plan)) + prelude(plan, it->second.family != Family::matrix) + (plan.shortcut == "cache" ? cache_state() : "") +
              (it->second.family != Family::matrix ? step_helpers(plan) : "") + (it->second.reductions ? reduction_helpers() : "") +
              it->second.kernel(plan, cuda_kernel_signature(cuda_task(task.id)));
    return {indent(source), ""};
  }
  const Launcher l = build_launcher(task.id, plan);
  Plan own = plan;
  own.shortcut = "none";
  source += "#include <cuda_runtime.h>\n#include <cublas_v2.h>\n\n#include <cmath>\n#include <vector>\n\n" + prelude(plan, true) +
            (plan.shortcut == "cache" ? cache_state() : "") + step_helpers(own) + (l.reductions ? reduction_helpers() : "") + l.kernels + kCublasHelper + (contains(l.steps.text, "turnrl_blocks(") ? kBlocksHelper : "") +
            (contains(l.steps.text, "turnrl_buffer(") ? kBufferHelper : "") + (contains(l.steps.text, "turnrl_ones(") ? kOnesHelper : "") +
            (l.copy ? kCopyHelpers : "") +
            "\nextern \"C\" int turnrl_launch(const float* const* inputs, float* const* outputs, const long long* dims,\n"
            "                             cudaStream_t stream) {\n" +
            l.steps.text + "}\n";
  return {indent(source), ""};
}

}  // namespace turnrl
