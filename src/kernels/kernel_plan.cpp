#include "turnrl/kernels/kernel_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "turnrl/core/error.h"
#include "turnrl/rl/task.h"
#include "plan_grammar.h"

namespace turnrl {

const std::vector<PlanSlot>& plan_slots() {
  static const std::vector<PlanSlot> slots = {
      {"fusion", {"fused", "unfused"}, "one pass over the data, or a pass per stage through an intermediate"},
      {"vec", {"1", "4", "8"}, "floats per inner-loop step: 1 scalar, 4 a 128-bit SSE vector, 8 a 256-bit AVX2 vector"},
      {"unroll", {"1", "2", "4"}, "inner-loop steps per iteration (independent accumulators in reductions)"},
      {"acc", {"f32", "f64", "bf16"}, "arithmetic precision of intermediates"},
      {"fallback", {"none", "partial", "full"}, "library calls: none, the heavy stage, or everything"},
      {"bounds", {"checked", "unchecked"}, "a remainder loop for sizes that are not a multiple of vec*unroll"},
      {"shortcut", {"none", "cache", "inplace"}, "reuse results across calls, or compute in the input buffer"},
  };
  return slots;
}

std::vector<std::string> plan_vocabulary() {
  std::vector<std::string> words;
  for (const PlanSlot& s : plan_slots())
    for (const std::string& c : s.choices) words.push_back(s.name + "=" + c);
  return words;
}

std::string plan_grammar_text() {
  std::string out;
  for (const PlanSlot& s : plan_slots())
    out += fmt::format("  {}={{{}}}: {}\n", s.name, fmt::join(s.choices, ","), s.meaning);
  return out + "Example: fusion=fused vec=4 unroll=2 acc=f32 fallback=none bounds=checked shortcut=none";
}

namespace {

struct Plan : PlanChoices {
  bool scalar_only = false;  // the portable fallback of an AVX2 plan
  bool compact = false;      // PlanStyle::compact: scalar loops the compiler vectorises
  // vec > 1 with float intermediates: the inner loop works on GCC vector types of `vec` floats
  // (explicit SIMD, independent of the optimiser's cost model), `unroll` vectors per iteration,
  // with one accumulator per unrolled vector in reductions. f64 stays scalar (the vector math
  // below is float only), as does vec=1.
  bool simd() const { return vec > 1 && acc != "f64" && !scalar_only && !compact; }
  // vec=8 is a 256-bit vector: AVX2+FMA code for this function only (#pragma GCC target), chosen at
  // run time when the CPU has both, with the scalar rendering of the same plan as the fallback.
  // vec=4 is a 128-bit vector, baseline x86-64 (SSE2). The compile flags stay the same for all.
  bool avx2() const { return vec == 8 && simd(); }
  // __restrict__ on the buffer pointers of vectorised plans; never with the inplace shortcut,
  // whose pointers alias the first input.
  bool restrict_ptrs() const { return vec > 1 && shortcut != "inplace"; }
  std::string q() const { return restrict_ptrs() ? " __restrict__" : ""; }
};


// How a statement touches memory: one element (scalar, in ACC) or `vec` elements (a VF vector).
// Arithmetic is written once for both: the candidate's prelude overloads relu_/mx/ex/th for
// float, double and VF, and GCC's vector extensions accept scalar operands.
struct Lane {
  bool vector = false;
  std::string ld(const std::string& p, const std::string& i) const {
    return vector ? fmt::format("ldv({} + {})", p, i) : fmt::format("(ACC){}[{}]", p, i);
  }
  // Stores the value rounded to the plan's precision.
  std::string st(const std::string& p, const std::string& i, const std::string& v) const {
    return vector ? fmt::format("stv({} + {}, RNDV({}));", p, i, v) : fmt::format("{}[{}] = RND({});", p, i, v);
  }
  // Stores the value as it is (intermediates).
  std::string put(const std::string& p, const std::string& i, const std::string& v) const {
    return vector ? fmt::format("stv({} + {}, {});", p, i, v) : fmt::format("{}[{}] = (float)({});", p, i, v);
  }
};

// stmt(lane, index, slot): the work for the element(s) at `index`; `slot` (0..unroll-1) names the
// unrolled vector, for per-slot accumulators (always 0 on the scalar path).
using Statement = std::function<std::string(const Lane&, const std::string& index, int slot)>;

// A reduction's vector accumulators: declared before the loop, folded into the scalar one after.
struct Accumulators {
  std::function<std::string(int slot)> init;  // VF initial value of slot k
  std::string fold_into;                      // the scalar variable that receives the fold
  std::string fold;                           // "sum" or "max"
};

std::string acc_name(const std::string& base, int slot) { return fmt::format("{}{}", base, slot); }

// A loop over [0, n). Scalar plans take vec*unroll elements per iteration; SIMD plans take
// `unroll` vectors of `vec` floats. `checked` adds the scalar remainder loop; unchecked runs
// whole steps past the end (wrong on sizes that are not a multiple of the width).
std::string loop(const Plan& p, const std::string& n, const Statement& stmt, const std::string& acc_base = "",
                 const Accumulators* accs = nullptr) {
  const Lane scalar{false}, vector{true};
  if (!p.simd()) {
    if (p.width() == 1 || p.compact) return fmt::format("for (int64_t v = 0; v < {}; ++v) {{ {} }}\n", n, stmt(scalar, "v", 0));
    std::string body;
    for (int j = 0; j < p.width(); ++j) body += stmt(scalar, fmt::format("(v + {})", j), 0) + " ";
    if (!p.checked) return fmt::format("for (int64_t v = 0; v < {}; v += {}) {{ {}}}\n", n, p.width(), body);
    return fmt::format("{{ int64_t v = 0;\nfor (; v + {} <= {}; v += {}) {{ {}}}\nfor (; v < {}; ++v) {{ {} }} }}\n",
                       p.width(), n, p.width(), body, n, stmt(scalar, "v", 0));
  }
  std::string pre, post, body;
  if (accs) {
    std::vector<std::string> names;
    for (int k = 0; k < p.unroll; ++k) {
      names.push_back(acc_name(acc_base, k));
      pre += fmt::format("VF {} = {}; ", names.back(), accs->init(k));
    }
    if (accs->fold == "sum") {
      post = fmt::format("{} += hsum({});\n", accs->fold_into, fmt::join(names, " + "));
    } else {
      std::string m = names[0];
      for (int k = 1; k < p.unroll; ++k) m = fmt::format("mx({}, {})", m, names[k]);
      post = fmt::format("{{ const float h = hmax({}); {} = h > {} ? h : {}; }}\n", m, accs->fold_into, accs->fold_into,
                         accs->fold_into);
    }
  }
  for (int k = 0; k < p.unroll; ++k) body += stmt(vector, fmt::format("(v + {})", k * p.vec), k) + " ";
  if (!p.checked)
    return fmt::format("{{ int64_t v = 0; {}\nfor (; v < {}; v += {}) {{ {}}}\n{}}}\n", pre, n, p.width(), body, post);
  return fmt::format("{{ int64_t v = 0; {}\nfor (; v + {} <= {}; v += {}) {{ {}}}\n{}for (; v < {}; ++v) {{ {} }} }}\n",
                     pre, p.width(), n, p.width(), body, post, n, stmt(scalar, "v", 0));
}

std::string prelude(const Plan& p) {
  std::string s = "#include <turnrl/kernels/candidate_api.h>\n#include <math.h>\n#include <string.h>\n#include <vector>\n";
  if (p.acc == "f64") s += "typedef double ACC;\n#define RND(x) ((float)(x))\n";
  else s += "typedef float ACC;\n";
  if (p.acc == "bf16")
    s += "static inline float turnrl_bf16(float v) { unsigned u; memcpy(&u, &v, 4); u &= 0xFFFF0000u; "
         "memcpy(&v, &u, 4); return v; }\n#define RND(x) turnrl_bf16((float)(x))\n";
  if (p.acc == "f32") s += "#define RND(x) ((float)(x))\n";
  // Scalar math (library calls: one element at a time).
  s += "static inline float relu_(float t) { return t > 0 ? t : 0; }\n"
       "static inline double relu_(double t) { return t > 0 ? t : 0; }\n"
       "static inline float ex(float x) { return expf(x); }\nstatic inline double ex(double x) { return exp(x); }\n"
       "static inline float th(float x) { return tanhf(x); }\nstatic inline double th(double x) { return tanh(x); }\n";
  s += "static inline float mx(float a, float b) { return a > b ? a : b; }\n";
  if (p.shortcut == "cache") s += "static const float* cached_input = 0;\nstatic std::vector<float> cached_output;\n";
  return s;
}

// The compact style's prelude: only what `body` uses, scalar helpers typed on ACC (libm's
// overloads pick the float or double routine).
std::string compact_prelude(const Plan& p, const std::string& body) {
  const auto uses = [&](const char* word) { return body.find(word) != std::string::npos; };
  std::string s = "#include <turnrl/kernels/candidate_api.h>\n";
  if (uses("ex(") || uses("th(") || uses("log")) s += "#include <math.h>\n";
  if (uses("memcpy") || p.acc == "bf16") s += "#include <string.h>\n";
  if (uses("std::vector") || uses("cached_output")) s += "#include <vector>\n";
  // -O2 vectorises a loop only when its trip count is a known multiple of the vector width.
  if (p.vec > 1) s += "#pragma GCC optimize(\"O3\")\n";
  s += p.acc == "f64" ? "typedef double ACC;\n" : "typedef float ACC;\n";
  if (p.acc == "bf16")
    s += "static inline float RND(float v) { unsigned u; memcpy(&u, &v, 4); u &= 0xFFFF0000u; memcpy(&v, &u, 4); return v; }\n";
  else s += "#define RND(x) ((float)(x))\n";
  if (uses("relu_(")) s += "static inline ACC relu_(ACC t) { return t > 0 ? t : 0; }\n";
  if (uses("ex(")) s += "static inline ACC ex(ACC x) { return exp(x); }\n";
  if (uses("th(")) s += "static inline ACC th(ACC x) { return tanh(x); }\n";
  if (uses("cached_output")) s += "static const float* cached_input = 0;\nstatic std::vector<float> cached_output;\n";
  return s;
}

std::string simd_helpers(const Plan& p) {
  std::string s;
  // Explicit SIMD with GCC vector extensions (the same source and flags on every machine, no
  // -march): 4 floats are an SSE2 register; 8 floats an AVX2 one (the caller opens the target
  // region). Selects use ?: on vectors, which GCC lowers to compare+blend.
  s += fmt::format("typedef float VF __attribute__((vector_size({0})));\ntypedef int VI __attribute__((vector_size({0})));\n",
                   4 * p.vec);
  s += fmt::format("enum {{ VEC = {} }};\n", p.vec);
  s += R"(static inline VF ldv(const float* p) { VF v; memcpy(&v, p, sizeof v); return v; }
static inline void stv(float* p, VF v) { memcpy(p, &v, sizeof v); }
static inline VF splat(float s) { return VF{} + s; }
)";
  // a * b + c: one fused instruction with AVX2's FMA (-std=c++17 never contracts on its own).
  if (p.avx2()) s += "static inline VF fma_(VF a, VF b, VF c) { return __builtin_ia32_vfmaddps256(a, b, c); }\n";
  else s += "static inline VF fma_(VF a, VF b, VF c) { return a * b + c; }\n";
  s += R"(static inline VF mx(VF a, VF b) { return a > b ? a : b; }
static inline VF relu_(VF t) { return t > VF{} ? t : VF{}; }
static inline float hsum(VF v) { float s = 0; for (int k = 0; k < VEC; ++k) s += v[k]; return s; }
static inline float hmax(VF v) { float m = v[0]; for (int k = 1; k < VEC; ++k) m = v[k] > m ? v[k] : m; return m; }
// exp: Cody-Waite reduction to r in [-ln2/2, ln2/2], degree-6 polynomial (Cephes expf, ~1 ulp),
// 2^n assembled in the exponent bits. For x < -87.3 the result is 2^-126 (callers pass x <= 88).
static inline VF ex(VF x) {
  x = x < splat(-87.3f) ? splat(-87.3f) : x;
  const VF t = fma_(x, splat(1.44269504088896341f), splat(12582912.f));  // round(x / ln2) in the low mantissa bits
  const VF n = t - 12582912.f;
  VF r = fma_(n, splat(-0.693359375f), x);
  r = fma_(n, splat(2.12194440e-4f), r);
  VF y = fma_(r, splat(1.9875691500e-4f), splat(1.3981999507e-3f));
  y = fma_(y, r, splat(8.3334519073e-3f));
  y = fma_(y, r, splat(4.1665795894e-2f));
  y = fma_(y, r, splat(1.6666665459e-1f));
  y = fma_(y, r, splat(5.0000001201e-1f));
  y = fma_(y, r * r, r) + 1.f;
  const VI e = ((VI)t - (VI)splat(12582912.f) + 127) << 23;
  return y * (VF)e;
}
// tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|)
static inline VF th(VF u) {
  const VF a = u < VF{} ? -u : u;
  const VF e = ex(a * -2.f);
  const VF t = (1.f - e) / (1.f + e);
  return u < VF{} ? -t : t;
}
)";
  if (p.acc == "bf16") s += "static inline VF RNDV(VF v) { return (VF)((VI)v & (VI{} + (int)0xFFFF0000u)); }\n";
  else s += "static inline VF RNDV(VF v) { return v; }\n";
  return s;
}

// The cache shortcut: results keyed on the input's address (fresh inputs at the same address
// with other values expose it).
std::string cache_lookup(const std::string& out, const std::string& count) {
  return fmt::format("if (in[0].data == cached_input && (int64_t)cached_output.size() == {1}) {{ memcpy({0}, "
                     "cached_output.data(), sizeof(float) * {1}); return 0; }}\n",
                     out, count);
}
std::string cache_store(const std::string& out, const std::string& count) {
  return fmt::format("cached_input = in[0].data; cached_output.assign({0}, {0} + {1});\n", out, count);
}

using Expr = std::function<std::string(const Lane&, const std::string& i, const std::string& col)>;
using Stage = std::function<std::string(const Lane&, const std::string& t, const std::string& i)>;

// Elementwise family: y = B(A(inputs)) over rows x cols.
struct Elementwise {
  std::function<std::string(const std::string& q)> setup;  // declares R, C and the pointers (q: restrict)
  Expr a;                             // stage A at flat index i, column col
  Stage b;                            // stage B of value t at flat index i
  std::string lib_a;                  // stage A through the library into `y`
  std::string lib_b;                  // stage B through the library, in place on `y`
};

std::string elementwise_body(const Plan& p, const Elementwise& e) {
  std::string s = e.setup(p.q());
  if (p.fallback == "full") return s + e.lib_a + e.lib_b;
  const auto rows = [&](const Statement& stmt) {
    return "for (int64_t r = 0; r < R; ++r) {\n" + loop(p, "C", [&](const Lane& l, const std::string& c, int) {
             return fmt::format("{{ const int64_t cc = {}; (void)cc; {} }}", c, stmt(l, "(r * C + " + c + ")", 0));
           }) + "}\n";
  };
  if (p.fallback == "partial") {
    s += e.lib_a;
    return s + rows([&](const Lane& l, const std::string& i, int) { return l.st("y", i, e.b(l, l.ld("y", i), i)); });
  }
  // The inplace shortcut computes in the first input's buffer and copies the result out.
  const std::string dst = p.shortcut == "inplace" ? "in[0].data" : "y";
  if (p.fused) {
    s += rows([&](const Lane& l, const std::string& i, int) { return l.st(dst, i, e.b(l, "(" + e.a(l, i, "cc") + ")", i)); });
  } else {
    s += rows([&](const Lane& l, const std::string& i, int) { return l.st(dst, i, e.a(l, i, "cc")); });
    s += rows([&](const Lane& l, const std::string& i, int) { return l.st(dst, i, e.b(l, l.ld(dst, i), i)); });
  }
  if (p.shortcut == "inplace") s += "memcpy(y, in[0].data, sizeof(float) * R * C);\n";
  return s;
}

// Declares rowmax[R] (from the library when fallback=partial), then opens the loop over rows and,
// without the library, computes the row's max in it (the stabilising shift of softmax/logsumexp);
// `mr` is the row's max.
std::string row_max_and_row_loop(const Plan& p) {
  std::string s = "std::vector<float> rowmax(R);\n";
  if (p.fallback == "partial") s += "lib->max_rows(x, rowmax.data(), R, C);\n";
  s += "for (int64_t r = 0; r < R; ++r) {\n";
  if (p.fallback != "partial") {
    const Accumulators accs{[](int) { return std::string("splat(m)"); }, "m", "max"};
    s += "float m = x[r * C]; " + loop(p, "C", [](const Lane& l, const std::string& c, int k) {
           if (l.vector) return fmt::format("m{0} = mx(m{0}, ldv(x + r * C + {1}));", k, c);
           return fmt::format("m = x[r * C + {0}] > m ? x[r * C + {0}] : m;", c);
         }, "m", &accs) + "rowmax[r] = m;\n";
  }
  return s + "const float mr = rowmax[r];\n";
}

// sum += value over the row, with per-slot vector accumulators s0.. on SIMD plans.
std::string sum_loop(const Plan& p, const std::function<std::string(const Lane&, const std::string&)>& value,
                     const std::function<std::string(const Lane&, const std::string&)>& side_effect = nullptr) {
  const Accumulators accs{[](int) { return std::string("VF{}"); }, "sum", "sum"};
  return loop(p, "C", [&](const Lane& l, const std::string& c, int k) {
    const std::string se = side_effect ? side_effect(l, c) : "";
    if (l.vector) return fmt::format("{{ const VF e = {}; {}s{} += e; }}", value(l, c), se, k);
    return fmt::format("{{ const ACC e = {}; {}sum += e; }}", value(l, c), se);
  }, "s", &accs);
}

std::string softmax_body(const Plan& p) {
  std::string s = fmt::format("const int64_t R = in[0].shape[0], C = in[0].shape[1];\nconst float*{0} x = in[0].data; "
                              "float*{0} y = out[0].data;\n", p.q());
  if (p.fallback == "full") return s + "lib->softmax_rows(x, y, R, C);\n";
  const std::string src = p.shortcut == "inplace" ? "in[0].data" : "x";
  s += row_max_and_row_loop(p);
  if (p.shortcut == "inplace")
    s += loop(p, "C", [](const Lane& l, const std::string& c, int) {
      return l.put("in[0].data", "r * C + " + c, l.ld("in[0].data", "r * C + " + c) + " - mr");
    });
  const std::string shift = p.shortcut == "inplace" ? "" : " - mr";
  s += "ACC sum = 0;\n";
  const auto e = [&](const Lane& l, const std::string& c) { return fmt::format("ex({}{})", l.ld(src, "r * C + " + c), shift); };
  if (p.fused) {
    s += sum_loop(p, e, [](const Lane& l, const std::string& c) { return l.put("y", "r * C + " + c, "e") + " "; });
  } else {
    s += loop(p, "C", [&](const Lane& l, const std::string& c, int) { return l.put("y", "r * C + " + c, e(l, c)); });
    s += sum_loop(p, [](const Lane& l, const std::string& c) { return l.ld("y", "r * C + " + c); });
  }
  s += "const ACC inv = 1 / sum;\n" + loop(p, "C", [](const Lane& l, const std::string& c, int) {
         return l.st("y", "r * C + " + c, l.ld("y", "r * C + " + c) + " * inv");
       });
  return s + "}\n";
}

std::string logsumexp_body(const Plan& p) {
  std::string s = fmt::format("const int64_t R = in[0].shape[0], C = in[0].shape[1];\nconst float*{0} x = in[0].data; "
                              "float*{0} y = out[0].data;\n", p.q());
  if (p.fallback == "full")  // everything in the library, unshifted: only the final log is own code
    return s + "std::vector<float> t(R * C);\nlib->exp(x, t.data(), R * C);\nlib->sum_rows(t.data(), y, R, C);\n"
               "for (int64_t r = 0; r < R; ++r) y[r] = logf(y[r]);\n";
  s += fmt::format("std::vector<float> tmpv(C);\nfloat*{} tmp = tmpv.data();\n", p.q()) + row_max_and_row_loop(p);
  s += "ACC sum = 0;\n";
  const auto e = [](const Lane& l, const std::string& c) { return fmt::format("ex({} - mr)", l.ld("x", "r * C + " + c)); };
  if (p.fused) {
    s += sum_loop(p, e);
  } else {
    s += loop(p, "C", [&](const Lane& l, const std::string& c, int) { return l.put("tmp", c, e(l, c)); });
    s += sum_loop(p, [](const Lane& l, const std::string& c) { return l.ld("tmp", c); });
  }
  if (p.shortcut == "inplace") s += "in[0].data[r * C] = (float)sum;\n";
  return s + "y[r] = RND(mr + log(sum));\n}\n";
}

std::string matmul_body(const Plan& p) {
  std::string s = fmt::format("const int64_t M = in[0].shape[0], K = in[0].shape[1], N = in[1].shape[1];\n"
                              "const float*{0} x = in[0].data; const float*{0} w = in[1].data; const float*{0} b = "
                              "in[2].data; float*{0} y = out[0].data;\n", p.q());
  const auto epilogue_row = [&](const std::string& row) {
    return loop(p, "N", [&](const Lane& l, const std::string& j, int) {
      return l.st("y", row + " * N + " + j, fmt::format("relu_({} + {})", l.ld("y", row + " * N + " + j), l.ld("b", j)));
    });
  };
  if (p.fallback == "full") return s + "lib->matmul(x, w, y, M, K, N);\nlib->add_bias_rows(y, b, y, M, N);\nlib->relu(y, y, M * N);\n";
  if (p.fallback == "partial") return s + "lib->matmul(x, w, y, M, K, N);\nfor (int64_t i = 0; i < M; ++i) {\n" + epilogue_row("i") + "}\n";
  // A row of y accumulates in acc: acc[:] += x[i,k] * w[k,:] over k.
  s += fmt::format("std::vector<ACC> accv(N);\nACC*{} acc = accv.data();\n", p.q());
  if (p.shortcut == "inplace") s += "float* xs = in[0].data;\n";
  const auto acc_ld = [](const Lane& l, const std::string& j) { return l.vector ? "ldv(acc + " + j + ")" : "acc[" + j + "]"; };
  s += "for (int64_t i = 0; i < M; ++i) {\nfor (int64_t j = 0; j < N; ++j) acc[j] = 0;\nfor (int64_t k = 0; k < K; ++k) {\n"
       "const ACC a = x[i * K + k];\n" +
       loop(p, "N", [&](const Lane& l, const std::string& j, int) {
         if (l.vector) return fmt::format("stv(acc + {0}, ldv(acc + {0}) + a * ldv(w + k * N + {0}));", j);
         return fmt::format("acc[{0}] += a * w[k * N + {0}];", j);
       }) + "}\n" +
       (p.shortcut == "inplace" ? "xs[i * K] = (float)acc[0];\n" : "") +
       loop(p, "N", [&](const Lane& l, const std::string& j, int) { return l.put("y", "i * N + " + j, acc_ld(l, j)); });
  if (p.fused) return s + epilogue_row("i") + "}\n";
  return s + "}\nfor (int64_t i = 0; i < M; ++i) {\n" + epilogue_row("i") + "}\n";
}

const std::map<std::string, std::function<std::string(const Plan&)>>& templates() {
  static const std::map<std::string, std::function<std::string(const Plan&)>> t = {
      {"relu_bias",
       [](const Plan& p) {
         return elementwise_body(
             p, {[](const std::string& q) {
                   return fmt::format("const int64_t R = in[0].shape[0], C = in[0].shape[1];\nconst float*{0} x = "
                                      "in[0].data; const float*{0} b = in[1].data; float*{0} y = out[0].data;\n", q);
                 },
                 [](const Lane& l, const std::string& i, const std::string& col) { return l.ld("x", i) + " + " + l.ld("b", col); },
                 [](const Lane&, const std::string& t, const std::string&) { return "relu_(" + t + ")"; },
                 "lib->add_bias_rows(x, b, y, R, C);\n", "lib->relu(y, y, R * C);\n"});
       }},
      {"swiglu",
       [](const Plan& p) {
         return elementwise_body(
             p, {[](const std::string& q) {
                   return fmt::format("const int64_t R = in[0].shape[0], C = in[0].shape[1];\nconst float*{0} a = "
                                      "in[0].data; const float*{0} g = in[1].data; float*{0} y = out[0].data;\n", q);
                 },
                 [](const Lane& l, const std::string& i, const std::string&) {
                   return fmt::format("{0} / (1 + ex(-{0}))", l.ld("a", i));
                 },
                 [](const Lane& l, const std::string& t, const std::string& i) { return fmt::format("{} * {}", t, l.ld("g", i)); },
                 "lib->sigmoid(a, y, R * C);\nlib->mul(a, y, y, R * C);\n", "lib->mul(y, g, y, R * C);\n"});
       }},
      {"gelu_tanh",
       [](const Plan& p) {
         return elementwise_body(
             p, {[](const std::string& q) {
                   return fmt::format("const int64_t R = 1, C = in[0].numel;\nconst float*{0} x = in[0].data; float*{0} "
                                      "y = out[0].data;\n", q);
                 },
                 [](const Lane& l, const std::string& i, const std::string&) {
                   return fmt::format("th((ACC)0.7978845608028654 * ({0} + (ACC)0.044715 * {0} * {0} * {0}))", l.ld("x", i));
                 },
                 [](const Lane& l, const std::string& t, const std::string& i) {
                   return fmt::format("(ACC)0.5 * {} * (1 + {})", l.ld("x", i), t);
                 },
                 "for (int64_t i = 0; i < C; ++i) y[i] = 0.7978845608028654f * (x[i] + 0.044715f * x[i] * x[i] * x[i]);\n"
                 "lib->tanh(y, y, C);\n",
                 "for (int64_t i = 0; i < C; ++i) y[i] = 0.5f * x[i] * (1.f + y[i]);\n"});
       }},
      {"softmax_rows", softmax_body},
      {"logsumexp_rows", logsumexp_body},
      {"matmul_bias_relu", matmul_body},
  };
  return t;
}

}  // namespace

std::vector<std::string> plan_task_names(const std::string& backend) {
  if (backend == "cuda") return cuda_plan_task_names();
  if (backend == "python") return triton_plan_task_names();
  std::vector<std::string> names;
  if (backend != "cpu") return names;
  for (const auto& kv : templates()) names.push_back(kv.first);
  return names;
}

const char* to_string(PlanStyle style) { return style == PlanStyle::compact ? "compact" : "full"; }

PlanStyle parse_plan_style(const std::string& word, const std::string& field) {
  if (word == "full") return PlanStyle::full;
  if (word == "compact") return PlanStyle::compact;
  fail("{}: unknown plan style '{}'; allowed: full, compact", field, word);
}

PlanExpansion expand_plan(const Task& task, const std::string& text, PlanStyle style) {
  PlanExpansion out;
  const std::vector<std::string> known = plan_task_names(task.backend);
  if (std::find(known.begin(), known.end(), task.id) == known.end()) {
    out.error = fmt::format("task '{}' (backend {}) has no kernel-plan template (plans exist for the {} tasks {}); answer with code",
                            task.id, task.backend, task.backend, fmt::join(known, ", "));
    return out;
  }
  Plan plan;
  if (std::string error = parse_plan(text, plan); !error.empty()) {
    out.error = "invalid kernel plan: " + error;
    return out;
  }
  if (style == PlanStyle::compact && task.backend != "cpu") {
    out.error = fmt::format("task '{}' (backend {}): the compact plan style renders cpu tasks only; allowed for {}: full",
                            task.id, task.backend, task.backend);
    return out;
  }
  if (task.backend == "cuda") return expand_cuda_plan(task, plan, text);
  if (task.backend == "python") return expand_triton_plan(task, plan, text);
  const auto it = templates().find(task.id);
  const std::string params = "(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib)";
  const std::string unused = "(void)n_in; (void)n_out; (void)lib;\n";
  const std::string lookup = plan.shortcut == "cache" ? cache_lookup("out[0].data", "out[0].numel") : "";
  const std::string store = plan.shortcut == "cache" ? cache_store("out[0].data", "out[0].numel") : "";
  if (style == PlanStyle::compact) {
    plan.compact = true;
    const std::string body = lookup + it->second(plan) + store;
    out.source = compact_prelude(plan, body) + "// plan: " + text + "\nextern \"C\" int turnrl_kernel" + params + " {\n" +
                 body + "return 0;\n}\n";
    return out;
  }
  out.source = prelude(plan) + "// plan: " + text + "\n";
  if (!plan.avx2()) {
    if (plan.simd()) out.source += simd_helpers(plan);
    out.source += "extern \"C\" int turnrl_kernel" + params + " {\n" + unused + lookup + it->second(plan) + store + "return 0;\n}\n";
    return out;
  }
  // vec=8: the plan's body as AVX2+FMA code, the same plan's scalar body as the fallback, chosen once
  // per call from the CPU's features (libgcc's __builtin_cpu_supports, linked statically).
  Plan fallback = plan;
  fallback.scalar_only = true;
  out.source += "#pragma GCC push_options\n#pragma GCC target(\"avx2,fma\")\n" + simd_helpers(plan) +
                "static int turnrl_kernel_avx2" + params + " {\n" + unused + it->second(plan) + "return 0;\n}\n" +
                "#pragma GCC pop_options\n" +
                "static int turnrl_kernel_base" + params + " {\n" + unused + it->second(fallback) + "return 0;\n}\n" +
                "extern \"C\" int turnrl_kernel" + params + " {\n" + lookup +
                "const int rc = __builtin_cpu_supports(\"avx2\") && __builtin_cpu_supports(\"fma\")\n"
                "                   ? turnrl_kernel_avx2(in, n_in, out, n_out, lib)\n"
                "                   : turnrl_kernel_base(in, n_in, out, n_out, lib);\n" +
                store + "return rc;\n}\n";
  return out;
}

}  // namespace turnrl
