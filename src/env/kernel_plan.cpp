#include "turnrl/env/kernel_plan.h"

#include <functional>
#include <map>
#include <sstream>

#include "turnrl/core/error.h"
#include "turnrl/env/task.h"

namespace turnrl {

const std::vector<PlanSlot>& plan_slots() {
  static const std::vector<PlanSlot> slots = {
      {"fusion", {"fused", "unfused"}, "one pass over the data, or a pass per stage through an intermediate"},
      {"vec", {"1", "4", "8"}, "elements per inner-loop step"},
      {"unroll", {"1", "2", "4"}, "inner-loop steps per iteration"},
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

struct Plan {
  bool fused = true;
  int width = 1;  // vec * unroll
  std::string acc, fallback, shortcut;
  bool checked = true;
};

std::string parse(const std::string& text, Plan& plan) {
  std::map<std::string, std::string> chosen;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos) return fmt::format("'{}' is not a slot=choice word; the slots are:\n{}", w, plan_grammar_text());
    const std::string slot = w.substr(0, eq), choice = w.substr(eq + 1);
    const PlanSlot* s = nullptr;
    for (const PlanSlot& candidate : plan_slots())
      if (candidate.name == slot) s = &candidate;
    if (!s) return fmt::format("unknown slot '{}' in '{}'; slots: fusion, vec, unroll, acc, fallback, bounds, shortcut", slot, w);
    if (std::find(s->choices.begin(), s->choices.end(), choice) == s->choices.end())
      return fmt::format("slot '{}': '{}' is not allowed; allowed: {}", slot, choice, fmt::join(s->choices, ", "));
    if (chosen.count(slot)) return fmt::format("slot '{}' is chosen twice", slot);
    chosen[slot] = choice;
  }
  for (const PlanSlot& s : plan_slots())
    if (!chosen.count(s.name))
      return fmt::format("slot '{}' is missing; choose one of {}", s.name, fmt::join(s.choices, ", "));
  plan.fused = chosen["fusion"] == "fused";
  plan.width = std::stoi(chosen["vec"]) * std::stoi(chosen["unroll"]);
  plan.acc = chosen["acc"];
  plan.fallback = chosen["fallback"];
  plan.checked = chosen["bounds"] == "checked";
  plan.shortcut = chosen["shortcut"];
  return {};
}

using Statement = std::function<std::string(const std::string& index)>;

// A loop over [0, n) in steps of the plan's width; `checked` adds the remainder loop, unchecked
// runs whole steps past the end (wrong on sizes that are not a multiple of the width).
std::string loop(const Plan& p, const std::string& n, const Statement& stmt) {
  if (p.width == 1) return fmt::format("for (int64_t v = 0; v < {}; ++v) {{ {} }}\n", n, stmt("v"));
  std::string body;
  for (int j = 0; j < p.width; ++j) body += stmt(fmt::format("(v + {})", j)) + " ";
  if (!p.checked) return fmt::format("for (int64_t v = 0; v < {}; v += {}) {{ {}}}\n", n, p.width, body);
  return fmt::format("{{ int64_t v = 0;\nfor (; v + {} <= {}; v += {}) {{ {}}}\nfor (; v < {}; ++v) {{ {} }} }}\n",
                     p.width, n, p.width, body, n, stmt("v"));
}

std::string prelude(const Plan& p) {
  std::string s = "#include <turnrl/eval/candidate_api.h>\n#include <math.h>\n#include <string.h>\n#include <vector>\n";
  if (p.acc == "f64") s += "typedef double ACC;\n#define RND(x) ((float)(x))\n";
  else s += "typedef float ACC;\n";
  if (p.acc == "bf16")
    s += "static inline float turnrl_bf16(float v) { unsigned u; memcpy(&u, &v, 4); u &= 0xFFFF0000u; "
         "memcpy(&v, &u, 4); return v; }\n#define RND(x) turnrl_bf16((float)(x))\n";
  if (p.acc == "f32") s += "#define RND(x) ((float)(x))\n";
  if (p.shortcut == "cache") s += "static const float* cached_input = 0;\nstatic std::vector<float> cached_output;\n";
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

// Elementwise family: y = B(A(inputs)) over rows x cols.
struct Elementwise {
  std::string setup;                  // declares R, C and the pointers
  std::function<std::string(const std::string&)> a;  // expression of stage A at flat index i (uses r, c)
  std::function<std::string(const std::string&, const std::string&)> b;  // stage B of value t at index i
  std::string lib_a;                  // stage A through the library into `y`
  std::string lib_b;                  // stage B through the library, in place on `y`
};

std::string elementwise_body(const Plan& p, const Elementwise& e) {
  std::string s = e.setup;
  if (p.fallback == "full") return s + e.lib_a + e.lib_b;
  const auto rows = [&](const Statement& stmt) {
    return "for (int64_t r = 0; r < R; ++r) {\n" + loop(p, "C", [&](const std::string& c) {
             return fmt::format("{{ const int64_t cc = {}; (void)cc; {} }}", c, stmt("(r * C + " + c + ")"));
           }) + "}\n";
  };
  if (p.fallback == "partial") {
    s += e.lib_a;
    return s + rows([&](const std::string& i) { return fmt::format("y[{0}] = RND({1});", i, e.b("(ACC)y[" + i + "]", i)); });
  }
  // The inplace shortcut computes in the first input's buffer and copies the result out.
  const std::string dst = p.shortcut == "inplace" ? "in[0].data" : "y";
  if (p.fused) {
    s += rows([&](const std::string& i) { return fmt::format("{}[{}] = RND({});", dst, i, e.b("(" + e.a(i) + ")", i)); });
  } else {
    s += rows([&](const std::string& i) { return fmt::format("{}[{}] = RND({});", dst, i, e.a(i)); });
    s += rows([&](const std::string& i) { return fmt::format("{0}[{1}] = RND({2});", dst, i, e.b("(ACC)" + dst + "[" + i + "]", i)); });
  }
  if (p.shortcut == "inplace") s += "memcpy(y, in[0].data, sizeof(float) * R * C);\n";
  return s;
}

// Declares rowmax[R] (from the library when fallback=partial), then opens the loop over rows and,
// without the library, computes the row's max in it (the stabilising shift of softmax/logsumexp).
std::string row_max_and_row_loop(const Plan& p) {
  std::string s = "std::vector<float> rowmax(R);\n";
  if (p.fallback == "partial") s += "lib->max_rows(x, rowmax.data(), R, C);\n";
  s += "for (int64_t r = 0; r < R; ++r) {\n";
  if (p.fallback != "partial")
    s += "float m = x[r * C]; " + loop(p, "C", [](const std::string& c) {
           return fmt::format("m = x[r * C + {0}] > m ? x[r * C + {0}] : m;", c);
         }) + "rowmax[r] = m;\n";
  return s;
}

std::string softmax_body(const Plan& p) {
  std::string s = "const int64_t R = in[0].shape[0], C = in[0].shape[1];\nconst float* x = in[0].data; float* y = out[0].data;\n";
  if (p.fallback == "full") return s + "lib->softmax_rows(x, y, R, C);\n";
  const std::string src = p.shortcut == "inplace" ? "in[0].data" : "x";
  s += row_max_and_row_loop(p);
  if (p.shortcut == "inplace")
    s += loop(p, "C", [](const std::string& c) { return fmt::format("in[0].data[r * C + {0}] -= rowmax[r];", c); });
  const std::string shift = p.shortcut == "inplace" ? "" : " - rowmax[r]";
  s += "ACC sum = 0;\n";
  if (p.fused) {
    s += loop(p, "C", [&](const std::string& c) {
      return fmt::format("{{ const ACC e = exp((ACC){0}[r * C + {1}]{2}); y[r * C + {1}] = (float)e; sum += e; }}", src, c, shift);
    });
  } else {
    s += loop(p, "C", [&](const std::string& c) { return fmt::format("y[r * C + {1}] = (float)exp((ACC){0}[r * C + {1}]{2});", src, c, shift); });
    s += loop(p, "C", [](const std::string& c) { return fmt::format("sum += y[r * C + {}];", c); });
  }
  s += "const ACC inv = 1 / sum;\n" +
       loop(p, "C", [](const std::string& c) { return fmt::format("y[r * C + {0}] = RND(y[r * C + {0}] * inv);", c); });
  return s + "}\n";
}

std::string logsumexp_body(const Plan& p) {
  std::string s = "const int64_t R = in[0].shape[0], C = in[0].shape[1];\nconst float* x = in[0].data; float* y = out[0].data;\n";
  if (p.fallback == "full")  // everything in the library, unshifted: only the final log is own code
    return s + "std::vector<float> t(R * C);\nlib->exp(x, t.data(), R * C);\nlib->sum_rows(t.data(), y, R, C);\n"
               "for (int64_t r = 0; r < R; ++r) y[r] = logf(y[r]);\n";
  s += "std::vector<float> tmp(C);\n" + row_max_and_row_loop(p);
  s += "ACC sum = 0;\n";
  if (p.fused) {
    s += loop(p, "C", [](const std::string& c) { return fmt::format("sum += exp((ACC)x[r * C + {}] - rowmax[r]);", c); });
  } else {
    s += loop(p, "C", [](const std::string& c) { return fmt::format("tmp[{0}] = (float)exp((ACC)x[r * C + {0}] - rowmax[r]);", c); });
    s += loop(p, "C", [](const std::string& c) { return fmt::format("sum += tmp[{}];", c); });
  }
  if (p.shortcut == "inplace") s += "in[0].data[r * C] = (float)sum;\n";
  return s + "y[r] = RND(rowmax[r] + log(sum));\n}\n";
}

std::string matmul_body(const Plan& p) {
  std::string s = "const int64_t M = in[0].shape[0], K = in[0].shape[1], N = in[1].shape[1];\n"
                  "const float* x = in[0].data; const float* w = in[1].data; const float* b = in[2].data; float* y = out[0].data;\n";
  const auto epilogue_row = [&](const std::string& row) {
    return loop(p, "N", [&](const std::string& j) {
      return fmt::format("{{ const ACC t = (ACC)y[{0} * N + {1}] + b[{1}]; y[{0} * N + {1}] = RND(t > 0 ? t : 0); }}", row, j);
    });
  };
  if (p.fallback == "full") return s + "lib->matmul(x, w, y, M, K, N);\nlib->add_bias_rows(y, b, y, M, N);\nlib->relu(y, y, M * N);\n";
  if (p.fallback == "partial") return s + "lib->matmul(x, w, y, M, K, N);\nfor (int64_t i = 0; i < M; ++i) {\n" + epilogue_row("i") + "}\n";
  s += "std::vector<ACC> acc(N);\n";
  if (p.shortcut == "inplace") s += "float* xs = in[0].data;\n";
  s += "for (int64_t i = 0; i < M; ++i) {\nfor (int64_t j = 0; j < N; ++j) acc[j] = 0;\nfor (int64_t k = 0; k < K; ++k) {\n"
       "const ACC a = x[i * K + k];\n" +
       loop(p, "N", [](const std::string& j) { return fmt::format("acc[{0}] += a * w[k * N + {0}];", j); }) + "}\n" +
       (p.shortcut == "inplace" ? "xs[i * K] = (float)acc[0];\n" : "") +
       loop(p, "N", [](const std::string& j) { return fmt::format("y[i * N + {0}] = (float)acc[{0}];", j); });
  if (p.fused) return s + epilogue_row("i") + "}\n";
  return s + "}\nfor (int64_t i = 0; i < M; ++i) {\n" + epilogue_row("i") + "}\n";
}

const std::map<std::string, std::function<std::string(const Plan&)>>& templates() {
  static const std::map<std::string, std::function<std::string(const Plan&)>> t = {
      {"relu_bias",
       [](const Plan& p) {
         return elementwise_body(
             p, {"const int64_t R = in[0].shape[0], C = in[0].shape[1];\nconst float* x = in[0].data; const float* b = "
                 "in[1].data; float* y = out[0].data;\n",
                 [](const std::string& i) { return fmt::format("(ACC)x[{}] + b[cc]", i); },
                 [](const std::string& t, const std::string&) { return fmt::format("({0} > 0 ? {0} : 0)", t); },
                 "lib->add_bias_rows(x, b, y, R, C);\n", "lib->relu(y, y, R * C);\n"});
       }},
      {"swiglu",
       [](const Plan& p) {
         return elementwise_body(
             p, {"const int64_t R = in[0].shape[0], C = in[0].shape[1];\nconst float* a = in[0].data; const float* g = "
                 "in[1].data; float* y = out[0].data;\n",
                 [](const std::string& i) { return fmt::format("(ACC)a[{0}] / (1 + exp(-(ACC)a[{0}]))", i); },
                 [](const std::string& t, const std::string& i) { return fmt::format("{} * g[{}]", t, i); },
                 "lib->sigmoid(a, y, R * C);\nlib->mul(a, y, y, R * C);\n", "lib->mul(y, g, y, R * C);\n"});
       }},
      {"gelu_tanh",
       [](const Plan& p) {
         return elementwise_body(
             p, {"const int64_t R = 1, C = in[0].numel;\nconst float* x = in[0].data; float* y = out[0].data;\n",
                 [](const std::string& i) {
                   return fmt::format("tanh((ACC)0.7978845608028654 * ((ACC)x[{0}] + (ACC)0.044715 * x[{0}] * x[{0}] * x[{0}]))", i);
                 },
                 [](const std::string& t, const std::string& i) { return fmt::format("(ACC)0.5 * x[{}] * (1 + {})", i, t); },
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

std::vector<std::string> plan_task_names() {
  std::vector<std::string> names;
  for (const auto& kv : templates()) names.push_back(kv.first);
  return names;
}

PlanExpansion expand_plan(const Task& task, const std::string& text) {
  PlanExpansion out;
  const auto it = templates().find(task.id);
  if (task.backend != "cpu" || it == templates().end()) {
    out.error = fmt::format("task '{}' has no kernel-plan template (plans exist for the CPU tasks {}); answer with code",
                            task.id, fmt::join(plan_task_names(), ", "));
    return out;
  }
  Plan plan;
  if (std::string error = parse(text, plan); !error.empty()) {
    out.error = "invalid kernel plan: " + error;
    return out;
  }
  std::string body = it->second(plan);
  if (plan.shortcut == "cache") body = cache_lookup("out[0].data", "out[0].numel") + body + cache_store("out[0].data", "out[0].numel");
  out.source = prelude(plan) + "// plan: " + text + "\n" +
               "extern \"C\" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, "
               "const turnrl_lib* lib) {\n(void)n_in; (void)n_out; (void)lib;\n" +
               body + "return 0;\n}\n";
  return out;
}

}  // namespace turnrl
