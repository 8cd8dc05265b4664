// Kernel plans rendered as Triton programs for the Python evaluator's GPU tasks
// (data/python_tasks/kernelbench_gpu.jsonl): a KernelBench `ModelNew` whose work runs in @triton.jit
// kernels, written the way data/python_candidates/<task>/honest_triton.py are.
//
// The slots in Triton:
//   vec, unroll  elementwise kernels: BLOCK = 128 threads x vec elements per step (vec-wide loads),
//                UNROLL steps per program (tl.static_range); row kernels (softmax, layernorm): the
//                row is read CHUNK = 128 * vec * unroll columns at a time by 4 * unroll warps (vec
//                elements per thread), and stays in registers when it fits one CHUNK; matmul tiles:
//                BLOCK_M = 32 * unroll, BLOCK_N = 16 * vec, BLOCK_K = 32.
//   acc          f32: float32 registers (tl.dot with input_precision="ieee"); f64: float64 registers
//                and float64 intermediate tensors (matmuls as double rank-1 updates: tl.dot has no
//                float64 path in the Triton releases this targets); bf16: every loaded value and
//                stage result rounded through bfloat16, bfloat16 intermediate tensors, bfloat16
//                tl.dot operands (the precision check or the tolerance catches it).
//   fusion       fused: one kernel; unfused: a kernel per stage through an intermediate tensor
//                (softmax: row statistics, then the normalisation; gelu: tanh part, then the
//                product; layernorm+gelu: layernorm, then gelu; gemm: product, then bias+ReLU;
//                matmul: split-K partial products, then their sum).
//   fallback     none: Triton kernels only; partial: the heavy stage in PyTorch (softmax: the
//                exponentials and sums around a Triton row max; gelu: the tanh part; layernorm: the
//                normalisation; matmuls: the product through torch.matmul, which those tasks
//                forbid); full: PyTorch only, no Triton kernel (lazy: the profile finds no
//                candidate kernel, or the forbidden op).
//   bounds       checked: masked loads and stores, right for every shape; unchecked: no masks,
//                right only when sizes are multiples of the block (the main shapes are; the extra
//                shape sets are not): row and tile kernels then read and write past the row or
//                the tensor, elementwise launches cover whole blocks only and leave the tail
//                unwritten. Loops have fixed trip counts, so a bad read cannot hang.
//   shortcut     cache: outputs kept per input address and shape (stale when the same buffer gets
//                new values: caches_results); inplace: the result is written over the input and
//                returned (matmuls: each row's first result is kept in A[i, 0], as the C++
//                template does), so the inputs change (mutates_inputs).
#include <functional>
#include <map>
#include <sstream>

#include "plan_grammar.h"
#include "turnrl/core/error.h"
#include "turnrl/rl/task.h"

namespace turnrl {
namespace {

// Python source built line by line; depth counts 4-space indents.
struct Py {
  std::string text;
  Py& operator()(int depth, const std::string& line) {
    text += std::string(size_t(4 * depth), ' ') + line + "\n";
    return *this;
  }
  Py& lines(int depth, const std::vector<std::string>& ls) {
    for (const std::string& l : ls) (*this)(depth, l);
    return *this;
  }
};

struct TritonPlan : PlanChoices {
  bool own() const { return fallback != "full"; }  // any Triton kernel at all
  bool f64() const { return acc == "f64"; }
  // Elementwise kernels: 4 warps, vec elements per thread per step, UNROLL steps per program.
  int block() const { return 128 * vec; }
  // Row kernels: CHUNK columns per step, read by 4 * unroll warps.
  int chunk() const { return 128 * vec * unroll; }
  int row_warps() const { return 4 * unroll; }
  // Matmul tiles.
  int tile_m() const { return 32 * unroll; }
  int tile_n() const { return 16 * vec; }
  int tile_warps() const { return tile_m() * tile_n() <= 4096 ? 4 : 8; }

  // Register type of intermediates (bf16 plans compute in float32 and round through bfloat16).
  std::string cdt() const { return f64() ? "tl.float64" : "tl.float32"; }
  // dtype of intermediate tensors between kernels.
  std::string idt() const { return f64() ? "torch.float64" : acc == "bf16" ? "torch.bfloat16" : "torch.float32"; }
  // A loaded value in the plan's precision.
  std::string in(const std::string& v) const {
    return acc == "bf16" ? v + ".to(tl.bfloat16).to(tl.float32)" : v + ".to(" + cdt() + ")";
  }
  // A stage's result rounded to the plan's precision.
  std::string rnd(const std::string& v) const { return acc == "bf16" ? "(" + v + ").to(tl.bfloat16).to(tl.float32)" : v; }
  std::string load(const std::string& ptr, const std::string& mask, const std::string& other = "0.0") const {
    if (!checked) return "tl.load(" + ptr + ")";
    return fmt::format("tl.load({}, mask={}, other={})", ptr, mask, other);
  }
  std::string store(const std::string& ptr, const std::string& value, const std::string& mask) const {
    if (!checked) return fmt::format("tl.store({}, {})", ptr, value);
    return fmt::format("tl.store({}, {}, mask={})", ptr, value, mask);
  }
};

// ------------------------------------------------------------------------------------ kernels

// An elementwise kernel over `n` elements (one of `args`): UNROLL steps of BLOCK elements per
// program; `body` is one step, at offsets `offs` (under `mask` when the plan checks bounds).
std::string elementwise_kernel(const TritonPlan& p, const std::string& name, const std::string& args,
                               const std::string& doc, const std::vector<std::string>& body) {
  Py py;
  py(0, "@triton.jit")(0, fmt::format("def {}({}, BLOCK: tl.constexpr, UNROLL: tl.constexpr):", name, args))(1, "# " + doc);
  py(1, "start = tl.program_id(0) * (BLOCK * UNROLL)")
    (1, "for u in tl.static_range(UNROLL):")
    (2, "offs = start + u * BLOCK + tl.arange(0, BLOCK)");
  if (p.checked) py(2, "mask = offs < n");
  return py.lines(2, body).text + "\n\n";
}

// Checked plans launch cdiv(n, BLOCK * UNROLL) programs; unchecked ones n // (BLOCK * UNROLL),
// whole blocks only (without masks a partial block would read and write past the end), so the tail
// of a size that is not a multiple stays unwritten.
std::string elementwise_launch(const TritonPlan& p, const std::string& name, const std::string& args,
                               const std::string& n) {
  const int per_program = p.block() * p.unroll;
  const std::string programs =
      p.checked ? fmt::format("triton.cdiv({}, {})", n, per_program) : fmt::format("{} // {}", n, per_program);
  return fmt::format("{}[({},)]({}, BLOCK={}, UNROLL={}, num_warps=4)", name, programs, args, p.block(), p.unroll);
}

// tanh(0.79788456 (v + 0.044715 v^3)) as `t`; tanh(z) = 2 / (1 + exp(-2z)) - 1.
std::vector<std::string> gelu_tanh_part(const TritonPlan& p, const std::string& v) {
  return {fmt::format("inner = 0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0})", v),
          "t = " + p.rnd("2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0")};
}

// y = GELU(x) elementwise (kb1_gelu fused; the second stage of layernorm+gelu), or with
// tanh_only stage 1 of unfused GELU: t = tanh(...) into an intermediate.
std::string gelu_kernel(const TritonPlan& p, bool tanh_only) {
  std::vector<std::string> body = {"x = " + p.in(p.load("x_ptr + offs", "mask"))};
  for (const std::string& l : gelu_tanh_part(p, "x")) body.push_back(l);
  if (tanh_only) {
    body.push_back(p.store("t_ptr + offs", "t", "mask"));
    return elementwise_kernel(p, "gelu_tanh_kernel", "x_ptr, t_ptr, n",
                              "stage 1: t = tanh(0.79788456 (x + 0.044715 x^3))", body);
  }
  body.push_back(p.store("y_ptr + offs", "0.5 * x * (1.0 + t)", "mask"));
  return elementwise_kernel(p, "gelu_kernel", "x_ptr, y_ptr, n", "y = 0.5 x (1 + tanh(0.79788456 (x + 0.044715 x^3)))",
                            body);
}

// Stage 2: y = 0.5 x (1 + t).
std::string gelu_product_kernel(const TritonPlan& p) {
  return elementwise_kernel(p, "gelu_product_kernel", "x_ptr, t_ptr, y_ptr, n", "stage 2: y = 0.5 x (1 + t)",
                            {"x = " + p.in(p.load("x_ptr + offs", "mask")), "t = " + p.in(p.load("t_ptr + offs", "mask")),
                             p.store("y_ptr + offs", "0.5 * x * (1.0 + t)", "mask")});
}

// One pass of a row kernel over the row's x: a reduction that defines `result`, or a store.
struct RowPass {
  std::string reduce;                  // "max" | "sum"; "" stores `value` at `store`
  std::string result, post;            // result = tl.<reduce>(...)<post>
  std::vector<std::string> after;      // scalar statements once `result` is known
  std::function<std::vector<std::string>(const std::string& cols)> lines;  // per-piece statements
  std::string value;                   // the element value (of x and what `lines` define)
  std::string store;                   // the row pointer a storing pass writes to
};

// A kernel with one program per row: `prelude` sets up x_row (and the rows it writes); with SINGLE
// the row is one CHUNK held in registers and every pass works on it, otherwise each pass walks the
// row CHUNK columns at a time. `tail` runs at the end of either branch.
std::string row_kernel(const TritonPlan& p, const std::string& name, const std::string& args, const std::string& doc,
                       const std::vector<std::string>& prelude, const std::string& other,
                       const std::vector<RowPass>& passes, const std::vector<std::string>& tail = {}) {
  Py py;
  py(0, "@triton.jit")(0, fmt::format("def {}({}, CHUNK: tl.constexpr, SINGLE: tl.constexpr):", name, args))(1, "# " + doc);
  py(1, "# SINGLE: the row fits one CHUNK and stays in registers; else each pass walks it CHUNK columns at a time.");
  py(1, "row = tl.program_id(0)").lines(1, prelude)(1, "cols = tl.arange(0, CHUNK)")(1, "if SINGLE:");
  if (p.checked) py(2, "mask = cols < n_cols");
  py(2, "x = " + p.in(p.load("x_row + cols", "mask", other)));
  for (const RowPass& s : passes) {
    if (s.lines) py.lines(2, s.lines("cols"));
    if (s.reduce.empty()) {
      py(2, p.store(s.store + " + cols", s.value, "mask"));
      continue;
    }
    py(2, fmt::format("{} = tl.{}({}, axis=0){}", s.result, s.reduce, s.value, s.post)).lines(2, s.after);
  }
  py.lines(2, tail)(1, "else:");
  for (const RowPass& s : passes) {
    const std::string acc = "acc_" + s.result;
    if (s.reduce == "max") py(2, fmt::format("{} = tl.full([CHUNK], -float(\"inf\"), {})", acc, p.cdt()));
    if (s.reduce == "sum") py(2, fmt::format("{} = tl.zeros([CHUNK], {})", acc, p.cdt()));
    py(2, "for c0 in range(0, n_cols, CHUNK):");
    if (p.checked) py(3, "mask = c0 + cols < n_cols");
    py(3, "x = " + p.in(p.load("x_row + c0 + cols", "mask", other)));
    if (s.lines) py.lines(3, s.lines("c0 + cols"));
    if (s.reduce.empty()) {
      py(3, p.store(s.store + " + c0 + cols", s.value, "mask"));
      continue;
    }
    py(3, s.reduce == "max" ? fmt::format("{0} = tl.maximum({0}, {1})", acc, s.value) : acc + " += " + s.value);
    py(2, fmt::format("{} = tl.{}({}, axis=0){}", s.result, s.reduce, acc, s.post)).lines(2, s.after);
  }
  return py.lines(2, tail).text + "\n\n";
}

// Softmax passes: the row max, the sum of exponentials, the normalised output.
RowPass row_max_pass() { return {"max", "row_max", "", {}, nullptr, "x", ""}; }
RowPass exp_sum_pass(const TritonPlan& p) { return {"sum", "row_sum", "", {}, nullptr, p.rnd("tl.exp(x - row_max)"), ""}; }

std::string softmax_kernel(const TritonPlan& p) {
  return row_kernel(p, "softmax_kernel", "x_ptr, y_ptr, n_cols, stride_x, stride_y", "y = exp(x - max) / sum, per row",
                    {"x_row = x_ptr + row * stride_x", "y_row = y_ptr + row * stride_y"}, "-float(\"inf\")",
                    {row_max_pass(), exp_sum_pass(p),
                     {"", "", "", {}, nullptr, p.rnd("tl.exp(x - row_max)") + " / row_sum", "y_row"}});
}

// Unfused stage 1: each row's max and sum of exponentials into two intermediates.
std::string softmax_stats_kernel(const TritonPlan& p) {
  return row_kernel(p, "softmax_stats_kernel", "x_ptr, max_ptr, sum_ptr, n_cols, stride_x",
                    "stage 1: the row's max and sum of exp(x - max)", {"x_row = x_ptr + row * stride_x"},
                    "-float(\"inf\")", {row_max_pass(), exp_sum_pass(p)},
                    {"tl.store(max_ptr + row, row_max)", "tl.store(sum_ptr + row, row_sum)"});
}

// Unfused stage 2: one CHUNK of one row per program.
std::string softmax_normalize_kernel(const TritonPlan& p) {
  Py py;
  py(0, "@triton.jit")
    (0, "def softmax_normalize_kernel(x_ptr, max_ptr, sum_ptr, y_ptr, n_cols, stride_x, stride_y, CHUNK: tl.constexpr):")
    (1, "# stage 2: y = exp(x - max) / sum, one CHUNK of one row per program")
    (1, "row = tl.program_id(0)")
    (1, "cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)");
  if (p.checked) py(1, "mask = cols < n_cols");
  py(1, "x = " + p.in(p.load("x_ptr + row * stride_x + cols", "mask")))
    (1, "row_max = " + p.in("tl.load(max_ptr + row)"))
    (1, "row_sum = " + p.in("tl.load(sum_ptr + row)"))
    (1, p.store("y_ptr + row * stride_y + cols", p.rnd("tl.exp(x - row_max)") + " / row_sum", "mask"));
  return py.text + "\n\n";
}

// fallback=partial: only the row max is the candidate's own.
std::string softmax_rowmax_kernel(const TritonPlan& p) {
  return row_kernel(p, "softmax_rowmax_kernel", "x_ptr, max_ptr, n_cols, stride_x", "the row's max",
                    {"x_row = x_ptr + row * stride_x"}, "-float(\"inf\")", {row_max_pass()},
                    {"tl.store(max_ptr + row, row_max)"});
}

// LayerNorm over the row (mean, variance, scale and shift), then GELU (with_gelu) or not.
std::string layernorm_kernel(const TritonPlan& p, bool with_gelu) {
  const std::string d = p.checked ? "tl.where(mask, x - mean, 0.0)" : "x - mean";
  RowPass mean{"sum", "mean", " / n_cols", {}, nullptr, "x", ""};
  RowPass var{"sum", "var", " / n_cols", {"rstd = 1.0 / tl.sqrt(var + eps)"},
              [d](const std::string&) { return std::vector<std::string>{"d = " + d}; }, "d * d", ""};
  RowPass out{"", "", "", {}, [&p, with_gelu](const std::string& cols) {
                std::vector<std::string> l = {"w = " + p.in(p.load("w_ptr + " + cols, "mask")),
                                              "b = " + p.in(p.load("b_ptr + " + cols, "mask")),
                                              "h = " + p.rnd("(x - mean) * rstd * w + b")};
                if (with_gelu)
                  for (const std::string& g : gelu_tanh_part(p, "h")) l.push_back(g);
                return l;
              },
              with_gelu ? "0.5 * h * (1.0 + t)" : "h", "y_row"};
  return row_kernel(p, with_gelu ? "layernorm_gelu_kernel" : "layernorm_kernel",
                    "x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_y, eps",
                    with_gelu ? "y = GELU((x - mean) / sqrt(var + eps) * w + b), per row"
                              : "stage 1: h = (x - mean) / sqrt(var + eps) * w + b, per row",
                    {"x_row = x_ptr + row * stride_x", "y_row = y_ptr + row * stride_y"}, "0.0", {mean, var, out});
}

// C = A @ B, one BLOCK_M x BLOCK_N tile per program; B is read through its strides (so the
// [N, K] weight of a Linear layer is its transpose). split: program_id(2) takes one of two K
// halves and writes its partial product to slice program_id(2) of C. bias_relu: the epilogue
// max(acc + bias, 0).
std::string matmul_kernel(const TritonPlan& p, const std::string& name, bool split, bool bias_relu) {
  std::string args = std::string("a_ptr, b_ptr, ") + (bias_relu ? "bias_ptr, " : "") + "c_ptr, M, N, K, " +
                     (split ? "K_SPLIT, " : "") + "stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, " +
                     (split ? "stride_cs, " : "") + "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr" +
                     (p.f64() ? "" : ", BLOCK_K: tl.constexpr");
  Py py;
  py(0, "@triton.jit")(0, "def " + name + "(" + args + "):");
  if (split) py(1, "# stage 1: the partial product of K half program_id(2), into slice program_id(2) of C");
  else py(1, bias_relu ? "# C = max(A @ B + bias, 0), one tile per program" : "# C = A @ B, one tile per program");
  py(1, "pid_m = tl.program_id(0)")(1, "pid_n = tl.program_id(1)")
    (1, "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    (1, "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)");
  if (split) py(1, "k_lo = tl.program_id(2) * K_SPLIT")(1, "c_ptr += tl.program_id(2) * stride_cs");
  const std::string k_lo = split ? "k_lo" : "0";
  py(1, "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=" + p.cdt() + ")");
  if (p.f64()) {
    const std::string k_hi = !split ? "K" : p.checked ? "tl.minimum(k_lo + K_SPLIT, K)" : "k_lo + K_SPLIT";
    py(1, "# float64 rank-1 updates (Triton's dot product has no float64 path)")
      (1, fmt::format("for k in range({}, {}):", k_lo, k_hi))
      (2, "a = " + p.in(p.load("a_ptr + offs_m * stride_am + k * stride_ak", "offs_m < M")))
      (2, "b = " + p.in(p.load("b_ptr + k * stride_bk + offs_n * stride_bn", "offs_n < N")))
      (2, "acc += a[:, None] * b[None, :]");
  } else {
    py(1, "offs_k = tl.arange(0, BLOCK_K)")
      (1, fmt::format("for k0 in range({}, {}, BLOCK_K):", k_lo, split ? "k_lo + K_SPLIT" : "K"))
      (2, "k = k0 + offs_k")
      (2, "a = " + p.load("a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak",
                          "(offs_m[:, None] < M) & (k[None, :] < K)"))
      (2, "b = " + p.load("b_ptr + k[:, None] * stride_bk + offs_n[None, :] * stride_bn",
                          "(k[:, None] < K) & (offs_n[None, :] < N)"));
    if (p.acc == "bf16") py(2, "acc += tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))");
    else py(2, "acc += tl.dot(a, b, input_precision=\"ieee\")  # IEEE float32 products, no TF32");
  }
  if (bias_relu)
    py(1, "bias = " + p.in(p.load("bias_ptr + offs_n", "offs_n < N")))(1, "acc = tl.maximum(acc + bias[None, :], 0.0)");
  py(1, p.store("c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn", "acc",
                "(offs_m[:, None] < M) & (offs_n[None, :] < N)"));
  return py.text + "\n\n";
}

// Sum of the two split-K partial products (contiguous [2, n] as parts, n = M * N).
std::string matmul_reduce_kernel(const TritonPlan& p) {
  return elementwise_kernel(p, "matmul_reduce_kernel", "parts_ptr, c_ptr, n", "stage 2: C = partial 0 + partial 1",
                            {"c = " + p.in(p.load("parts_ptr + offs", "mask")) + " + " +
                                 p.in(p.load("parts_ptr + n + offs", "mask")),
                             p.store("c_ptr + offs", "c", "mask")});
}

// y = max(g + bias[column], 0) over a contiguous [M, N] product g (n = M * N).
std::string bias_relu_kernel(const TritonPlan& p) {
  return elementwise_kernel(p, "bias_relu_kernel", "g_ptr, bias_ptr, y_ptr, n, N", "stage 2: y = max(g + bias, 0)",
                            {"g = " + p.in(p.load("g_ptr + offs", "mask")),
                             "bias = " + p.in(p.load("bias_ptr + offs % N", "mask")),
                             p.store("y_ptr + offs", "tl.maximum(g + bias, 0.0)", "mask")});
}

// shortcut=inplace of the matmuls: row i's first result is kept in A[i, 0], one row per program.
std::string stash_kernel() {
  return "@triton.jit\n"
         "def stash_kernel(c_ptr, a_ptr, stride_cm, stride_am):\n"
         "    # shortcut=inplace: A[i, 0] = C[i, 0], computing in the input's buffer\n"
         "    row = tl.program_id(0)\n"
         "    tl.store(a_ptr + row * stride_am, tl.load(c_ptr + row * stride_cm))\n\n\n";
}

// --------------------------------------------------------------------------------- ModelNew

// A task's module: the kernels, the constructor's statements, forward's argument list and the
// statements that compute `result` (its last stage's output).
struct Program {
  std::string kernels;
  std::vector<std::string> init;     // after super().__init__()
  std::vector<std::string> args;     // forward's tensor arguments
  std::string init_args;             // "" or ", dim" ...
  std::vector<std::string> body;     // forward, computing `result`
  std::string result;
};

// The output buffer of a last stage that is a Triton kernel: a fresh tensor, or the input itself.
std::string output_buffer(const TritonPlan& p, const std::string& name, const std::string& like) {
  if (p.shortcut == "inplace") return name + " = " + like + "  # shortcut=inplace: the result overwrites the input";
  return name + " = torch.empty_like(" + like + ")";
}

// The result of a last stage computed by PyTorch: a fresh tensor, or written over the input.
std::string torch_result(const TritonPlan& p, const std::string& name, const std::string& value, const std::string& input) {
  if (p.shortcut == "inplace") return fmt::format("{} = {}.copy_({})  # shortcut=inplace: the result overwrites the input", name, input, value);
  return name + " = " + value;
}

std::string gelu_torch(const std::string& v) {
  return fmt::format("0.5 * {0} * (1.0 + torch.tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0})))", v);
}

std::vector<std::string> layernorm_torch() {
  return {"mean = x.mean(dim=1, keepdim=True)", "d = x - mean",
          "h = d * torch.rsqrt((d * d).mean(dim=1, keepdim=True) + self.norm.eps) * self.norm.weight + self.norm.bias"};
}

// The launch of a row kernel: `block` (the row's CHUNK) and SINGLE are computed in forward.
std::string row_launch(const TritonPlan& p, const std::string& name, const std::string& grid, const std::string& args) {
  return fmt::format("{}[{}]({}, CHUNK=block, SINGLE=n_cols <= block, num_warps={})", name, grid, args, p.row_warps());
}

std::vector<std::string> row_setup(const TritonPlan& p) {
  return {"n_rows, n_cols = x.shape", fmt::format("block = min({}, triton.next_power_of_2(n_cols))", p.chunk())};
}

Program gelu_program(const TritonPlan& p) {
  Program g{"", {}, {"x"}, "", {}, "y"};
  if (!p.own()) {
    g.body = {torch_result(p, "y", gelu_torch("x"), "x")};
    return g;
  }
  g.body = {"x = x.contiguous()", output_buffer(p, "y", "x"), "n = x.numel()"};
  if (p.fallback == "partial") {
    g.kernels = gelu_product_kernel(p);
    g.body.push_back("t = torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))  # fallback=partial: PyTorch");
    g.body.push_back(elementwise_launch(p, "gelu_product_kernel", "x, t, y, n", "n"));
  } else if (p.fused) {
    g.kernels = gelu_kernel(p, false);
    g.body.push_back(elementwise_launch(p, "gelu_kernel", "x, y, n", "n"));
  } else {
    g.kernels = gelu_kernel(p, true) + gelu_product_kernel(p);
    g.body.push_back("t = torch.empty(x.shape, device=x.device, dtype=" + p.idt() + ")");
    g.body.push_back(elementwise_launch(p, "gelu_tanh_kernel", "x, t, n", "n"));
    g.body.push_back(elementwise_launch(p, "gelu_product_kernel", "x, t, y, n", "n"));
  }
  return g;
}

Program softmax_program(const TritonPlan& p) {
  Program s{"", {}, {"x"}, "", {}, "y"};
  if (!p.own()) {
    s.body = {"e = torch.exp(x - x.amax(dim=1, keepdim=True))", torch_result(p, "y", "e / e.sum(dim=1, keepdim=True)", "x")};
    return s;
  }
  s.body = {"x = x.contiguous()"};
  if (p.fallback != "partial") s.body.push_back(output_buffer(p, "y", "x"));
  for (const std::string& l : row_setup(p)) s.body.push_back(l);
  if (p.fallback == "partial") {
    s.kernels = softmax_rowmax_kernel(p);
    s.body.insert(s.body.end(), {"row_max = torch.empty((n_rows,), device=x.device, dtype=torch.float32)",
                                 row_launch(p, "softmax_rowmax_kernel", "(n_rows,)", "x, row_max, n_cols, x.stride(0)"),
                                 "e = torch.exp(x - row_max[:, None])  # fallback=partial: PyTorch",
                                 torch_result(p, "y", "e / e.sum(dim=1, keepdim=True)", "x")});
    return s;
  }
  if (p.fused) {
    s.kernels = softmax_kernel(p);
    s.body.push_back(row_launch(p, "softmax_kernel", "(n_rows,)", "x, y, n_cols, x.stride(0), y.stride(0)"));
  } else {
    s.kernels = softmax_stats_kernel(p) + softmax_normalize_kernel(p);
    s.body.push_back("row_max = torch.empty((n_rows,), device=x.device, dtype=" + p.idt() + ")");
    s.body.push_back("row_sum = torch.empty((n_rows,), device=x.device, dtype=" + p.idt() + ")");
    s.body.push_back(row_launch(p, "softmax_stats_kernel", "(n_rows,)", "x, row_max, row_sum, n_cols, x.stride(0)"));
    s.body.push_back(fmt::format(
        "softmax_normalize_kernel[(n_rows, triton.cdiv(n_cols, block))](x, row_max, row_sum, y, n_cols, x.stride(0), "
        "y.stride(0), CHUNK=block, num_warps={})",
        p.row_warps()));
  }
  return s;
}

Program layernorm_gelu_program(const TritonPlan& p) {
  Program l{"", {"self.norm = nn.LayerNorm(dim)", "with torch.no_grad():", "    self.norm.weight.uniform_(0.5, 1.5)",
                 "    self.norm.bias.uniform_(-0.5, 0.5)"},
            {"x"}, ", dim", {}, "y"};
  const std::string params = "self.norm.weight, self.norm.bias";
  if (!p.own()) {
    l.body = layernorm_torch();
    l.body.push_back(torch_result(p, "y", gelu_torch("h"), "x"));
    return l;
  }
  l.body = {"x = x.contiguous()", output_buffer(p, "y", "x")};
  if (p.fallback == "partial") {
    l.kernels = gelu_kernel(p, false);
    l.body.push_back("# fallback=partial: the layer norm in PyTorch");
    for (const std::string& s : layernorm_torch()) l.body.push_back(s);
    l.body.push_back(elementwise_launch(p, "gelu_kernel", "h, y, h.numel()", "h.numel()"));
    return l;
  }
  for (const std::string& s : row_setup(p)) l.body.push_back(s);
  if (p.fused) {
    l.kernels = layernorm_kernel(p, true);
    l.body.push_back(row_launch(p, "layernorm_gelu_kernel", "(n_rows,)",
                                "x, " + params + ", y, n_cols, x.stride(0), y.stride(0), self.norm.eps"));
  } else {
    l.kernels = layernorm_kernel(p, false) + gelu_kernel(p, false);
    l.body.push_back("h = torch.empty(x.shape, device=x.device, dtype=" + p.idt() + ")");
    l.body.push_back(row_launch(p, "layernorm_kernel", "(n_rows,)",
                                "x, " + params + ", h, n_cols, x.stride(0), h.stride(0), self.norm.eps"));
    l.body.push_back(elementwise_launch(p, "gelu_kernel", "h, y, h.numel()", "h.numel()"));
  }
  return l;
}

// The tile launch of a matmul kernel: operands a, b (with b's K and N strides), output c.
std::string tile_launch(const TritonPlan& p, const std::string& name, const std::string& grid_extra,
                        const std::string& operands, const std::string& sizes, const std::string& strides) {
  return fmt::format("{}[(triton.cdiv(M, {}), triton.cdiv(N, {}){})]({}, {}, {}, BLOCK_M={}, BLOCK_N={}{}, num_warps={})",
                     name, p.tile_m(), p.tile_n(), grid_extra, operands, sizes, strides, p.tile_m(), p.tile_n(),
                     p.f64() ? "" : ", BLOCK_K=32", p.tile_warps());
}

// kb1_matmul (a = A, b = B) and kb2_gemm_bias_relu (a = x, b = W^T through W's strides).
Program matmul_program(const TritonPlan& p, bool gemm) {
  Program m{"", {}, {"A", "B"}, "", {}, "C"};
  std::string a = "A", b = "B", c = "C", b_strides = "B.stride(0), B.stride(1)";
  if (gemm) {
    m = Program{"", {"self.gemm = nn.Linear(in_features, out_features, bias=True)"}, {"x"}, ", in_features, out_features",
                {"x = x.contiguous()", "w, b = self.gemm.weight, self.gemm.bias"}, "y"};
    a = "x", b = "w", c = "y", b_strides = "w.stride(1), w.stride(0)";
  }
  if (!p.own()) {
    const std::string product = "torch.matmul(" + a + ", " + (gemm ? "w.t()" : "B") + ")";
    m.body.push_back(c + " = " + (gemm ? product + ".add_(b).clamp_min_(0.0)" : product));
    if (p.shortcut == "inplace") m.body.push_back(fmt::format("{0}[:, 0].copy_({1}[:, 0])  # shortcut=inplace", a, c));
    return m;
  }
  m.body.push_back("M, K = " + a + ".shape");
  m.body.push_back(gemm ? "N = w.shape[0]" : "N = B.shape[1]");
  const std::string a_strides = a + ".stride(0), " + a + ".stride(1)";
  m.body.push_back(c + " = torch.empty((M, N), device=" + a + ".device, dtype=torch.float32)");
  if (gemm) m.body.push_back("# W is [N, K]: the kernels read it as the [K, N] operand through its strides.");
  const std::string sizes = "M, N, K";
  const std::string c_strides = c + ".stride(0), " + c + ".stride(1)";
  if (p.fallback == "partial") {
    if (gemm) {
      m.kernels = bias_relu_kernel(p);
      m.body.push_back("g = torch.matmul(x, w.t())  # fallback=partial: the product in PyTorch");
      m.body.push_back(elementwise_launch(p, "bias_relu_kernel", "g, b, y, M * N, N", "M * N"));
    } else {
      m.kernels = matmul_reduce_kernel(p);
      m.body.insert(m.body.end(), {"half = K // 2", "parts = torch.empty((2, M, N), device=A.device, dtype=torch.float32)",
                                   "torch.matmul(A[:, :half], B[:half], out=parts[0])  # fallback=partial: PyTorch",
                                   "torch.matmul(A[:, half:], B[half:], out=parts[1])",
                                   elementwise_launch(p, "matmul_reduce_kernel", "parts, C, M * N", "M * N")});
    }
  } else if (p.fused) {
    const std::string name = gemm ? "gemm_bias_relu_kernel" : "matmul_kernel";
    m.kernels = matmul_kernel(p, name, false, gemm);
    m.body.push_back(tile_launch(p, name, "", gemm ? "x, w, b, y" : "A, B, C", sizes,
                                 a_strides + ", " + b_strides + ", " + c_strides));
  } else if (gemm) {
    m.kernels = matmul_kernel(p, "matmul_kernel", false, false) + bias_relu_kernel(p);
    m.body.push_back("g = torch.empty((M, N), device=x.device, dtype=" + p.idt() + ")");
    m.body.push_back(tile_launch(p, "matmul_kernel", "", "x, w, g", sizes, a_strides + ", " + b_strides + ", g.stride(0), g.stride(1)"));
    m.body.push_back(elementwise_launch(p, "bias_relu_kernel", "g, b, y, M * N, N", "M * N"));
  } else {
    m.kernels = matmul_kernel(p, "matmul_split_kernel", true, false) + matmul_reduce_kernel(p);
    // Each half starts on a BLOCK_K boundary (float64 plans step one k at a time).
    m.body.push_back(p.f64() ? "k_split = triton.cdiv(K, 2)" : "k_split = triton.cdiv(triton.cdiv(K, 2), 32) * 32");
    m.body.push_back("parts = torch.empty((2, M, N), device=A.device, dtype=" + p.idt() + ")");
    m.body.push_back(tile_launch(p, "matmul_split_kernel", ", 2", "A, B, parts", sizes + ", k_split",
                                 a_strides + ", " + b_strides + ", parts.stride(1), parts.stride(2), parts.stride(0)"));
    m.body.push_back(elementwise_launch(p, "matmul_reduce_kernel", "parts, C, M * N", "M * N"));
  }
  if (p.shortcut == "inplace") {
    m.kernels += stash_kernel();
    m.body.push_back(fmt::format("stash_kernel[(M,)]({0}, {1}, {0}.stride(0), {1}.stride(0))", c, a));
  }
  return m;
}

const std::map<std::string, std::function<Program(const TritonPlan&)>>& templates() {
  static const std::map<std::string, std::function<Program(const TritonPlan&)>> t = {
      {"kb1_gelu", gelu_program},
      {"kb1_matmul", [](const TritonPlan& p) { return matmul_program(p, false); }},
      {"kb1_softmax", softmax_program},
      {"kb2_gemm_bias_relu", [](const TritonPlan& p) { return matmul_program(p, true); }},
      {"kb2_layernorm_gelu", layernorm_gelu_program},
  };
  return t;
}

std::string module_source(const TritonPlan& p, const std::string& text, const Program& g) {
  std::string s = "# plan: " + text + "\nimport torch\nimport torch.nn as nn\n";
  if (p.own()) s += "import triton\nimport triton.language as tl\n";
  s += "\n\n" + g.kernels;
  Py py;
  py(0, "class ModelNew(nn.Module):")(1, "def __init__(self" + g.init_args + "):")(2, "super().__init__()").lines(2, g.init);
  if (p.shortcut == "cache") py(2, "self.cache = {}  # shortcut=cache: outputs kept per input address and shape");
  py(0, "")(1, fmt::format("def forward(self, {}):", fmt::join(g.args, ", ")));
  if (p.shortcut == "cache") {
    std::vector<std::string> key;
    for (const std::string& a : g.args) key.push_back(a + ".data_ptr(), tuple(" + a + ".shape)");
    py(2, fmt::format("key = ({})", fmt::join(key, ", ")))(2, "if key in self.cache:")(3, "return self.cache[key]");
  }
  py.lines(2, g.body);
  if (p.shortcut == "cache") py(2, "self.cache[key] = " + g.result);
  py(2, "return " + g.result);
  return s + py.text;
}

}  // namespace

std::vector<std::string> triton_plan_task_names() {
  std::vector<std::string> names;
  for (const auto& kv : templates()) names.push_back(kv.first);
  return names;
}

PlanExpansion expand_triton_plan(const Task& task, const PlanChoices& plan, const std::string& text) {
  const auto it = templates().find(task.id);
  if (it == templates().end()) return {"", "task '" + task.id + "' has no Triton kernel-plan template"};
  TritonPlan p;
  static_cast<PlanChoices&>(p) = plan;
  std::istringstream words(text);
  std::string line;
  for (std::string w; words >> w;) line += (line.empty() ? "" : " ") + w;
  return {module_source(p, line, it->second(p)), ""};
}

}  // namespace turnrl
