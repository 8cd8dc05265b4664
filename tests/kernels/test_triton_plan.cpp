// Kernel plans rendered as Triton programs for the Python backend's GPU tasks: every plan of every
// task renders a ModelNew; every rendering is valid Python whose names are defined, whose kernel
// launches match the kernels' signatures and that passes (or fails, for the matmuls' library
// fallbacks) the worker's own static checks; and each slot shows in the source the way it should.
// Running the programs needs a GPU with Triton: tests/kernels/test_triton_plan_cuda.cpp.
#include <catch2/catch.hpp>

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "turnrl/core/filesystem.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/rl/task.h"
#include "turnrl/kernels/python_backend.h"
#include "kernels/plan_words.h"

using namespace turnrl;
using test::every_plan;
using test::plan_words;

namespace {

std::string source_dir() {
  if (const char* s = std::getenv("TURNRL_SOURCE_DIR")) return s;
  return TURNRL_SOURCE_DIR;
}

const TaskSet& gpu_tasks() {
  static const TaskSet tasks = load_tasks_jsonl(source_dir() + "/data/python_tasks/kernelbench_gpu.jsonl");
  return tasks;
}

std::string render(const std::string& task, const std::string& words) {
  const PlanExpansion x = expand_plan(gpu_tasks().find(task), words);
  INFO(task << " [" << words << "]: " << x.error);
  REQUIRE(x.error.empty());
  return x.source;
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

bool is_matmul(const std::string& task) { return task == "kb1_matmul" || task == "kb2_gemm_bias_relu"; }

// Checks every file of a folder listed in its manifest ("file<TAB>forbidden ops<TAB>expected static
// finding or '-'"): ast.parse; every name a function reads is defined (kernels read only tl, their
// own names and other kernels); every kernel launch passes exactly the kernel's parameters, the
// constexpr ones by keyword; the worker's static checks find exactly the expected flag.
const char* kChecker = R"PY(
import ast, builtins, importlib.util, os, sys

folder, worker = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("turnrl_worker_checks", worker)
w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w)
problems = []
checked = 0
for line in open(os.path.join(folder, "manifest.tsv")):
    name, forbid, expect = line.rstrip("\n").split("\t")
    path = os.path.join(folder, name)
    source = open(path).read()
    try:
        tree = ast.parse(source, name)
    except SyntaxError as e:
        problems.append("%s:%s: %s" % (name, e.lineno, e.msg))
        continue
    checked += 1
    module = set(dir(builtins))
    kernels = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            module.add(node.name)
            if isinstance(node, ast.FunctionDef) and [ast.unparse(d) for d in node.decorator_list] == ["triton.jit"]:
                kernels[node.name] = node
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    for fn in functions:
        local = {a.arg for a in fn.args.args}
        body = [n for stmt in fn.body for n in ast.walk(stmt)]
        local |= {n.id for n in body if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for n in body:
            if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)) or n.id in local:
                continue
            if fn.name in kernels:
                if n.id not in ("tl", "float", "range") and n.id not in kernels:
                    problems.append("%s:%d: kernel %s reads %s" % (name, n.lineno, fn.name, n.id))
            elif n.id not in module:
                problems.append("%s:%d: %s reads undefined %s" % (name, n.lineno, fn.name, n.id))
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript)):
            continue
        kernel = kernels.get(getattr(call.func.value, "id", None))
        if kernel is None:
            problems.append("%s:%d: launch of something that is not a kernel" % (name, call.lineno))
            continue
        params = [a.arg for a in kernel.args.args]
        constexpr = [a.arg for a in kernel.args.args if a.annotation is not None]
        keywords = [k.arg for k in call.keywords if k.arg not in ("num_warps", "num_stages")]
        if params != params[:len(call.args)] + keywords or sorted(keywords) != sorted(constexpr):
            problems.append("%s:%d: %s(%s) launched with %d positional arguments and %s" % (
                name, call.lineno, kernel.name, ", ".join(params), len(call.args), keywords))
    found = {f["flag"] for f in w._static_checks(source, {"forbid": [f for f in forbid.split(",") if f]}, tree)}
    if found != ({expect} if expect != "-" else set()):
        problems.append("%s: the worker's static checks found %s, expected %s" % (name, sorted(found), expect))
print("checked %d files" % checked)
for p in problems[:40]:
    print(p)
sys.exit(1 if problems else 0)
)PY";

}  // namespace

TEST_CASE("triton plans: the five KernelBench GPU tasks have templates, other python tasks get an error", "[env][plan]") {
  const std::vector<std::string> names = plan_task_names("python");
  REQUIRE(names == std::vector<std::string>{"kb1_gelu", "kb1_matmul", "kb1_softmax", "kb2_gemm_bias_relu",
                                            "kb2_layernorm_gelu"});
  for (const std::string& id : names) CHECK(gpu_tasks().find(id).backend == "python");
  Task other = gpu_tasks().find("kb1_softmax");
  other.id = "kb1_relu";
  CHECK_THAT(expand_plan(other, plan_words("")).error, Catch::Contains("no kernel-plan template") && Catch::Contains("kb1_softmax"));
  CHECK_THAT(expand_plan(gpu_tasks().find("kb1_gelu"), plan_words("") + " vec=3").error,
             Catch::Contains("slot 'vec': '3' is not allowed"));
}

TEST_CASE("triton plans: every plan of every task renders a ModelNew with its plan on the first line", "[env][plan]") {
  const std::vector<std::string> plans = every_plan();
  REQUIRE(plans.size() == 972);
  for (const std::string& task : plan_task_names("python"))
    for (const std::string& words : plans) {
      const std::string s = render(task, words);
      INFO(task << " [" << words << "]");
      REQUIRE(s.rfind("# plan: " + words + "\n", 0) == 0);
      REQUIRE(has(s, "\nclass ModelNew(nn.Module):\n"));
      REQUIRE(has(s, "    def forward(self, "));
    }
  // Words may be split by any whitespace; the plan line has them one space apart.
  const std::string spaced = render("kb1_gelu", "fusion=fused\nvec=4  unroll=2 acc=f32 fallback=none bounds=checked shortcut=none");
  CHECK(spaced.rfind("# plan: " + plan_words("") + "\n", 0) == 0);
}

TEST_CASE("triton plans: every rendering is valid Python that the worker's static checks accept", "[env][plan]") {
  // Sources that differ only in their plan line are checked once (the full fallback ignores most slots).
  const char* fixed = std::getenv("TURNRL_TEST_PYTHON");
  const std::string python = fixed ? fixed : "python3";
  if (std::system((python + " -c 'import ast' > /dev/null 2>&1").c_str()) != 0) {
    WARN("SKIPPED: no " << python << " to parse the rendered programs with");
    return;
  }
  char folder_template[] = "/tmp/turnrl_triton_plans_XXXXXX";
  REQUIRE(mkdtemp(folder_template));
  const std::string folder = folder_template;
  std::ofstream manifest(folder + "/manifest.tsv");
  std::set<std::string> seen;
  size_t files = 0;
  for (const std::string& task : plan_task_names("python")) {
    const std::string forbid = gpu_tasks().find(task).metadata.at("forbid");
    for (const std::string& words : every_plan()) {
      const std::string s = render(task, words);
      if (!seen.insert(s.substr(s.find('\n'))).second) continue;
      // The matmuls' library fallbacks call torch.matmul, which those tasks forbid.
      const bool forbidden = is_matmul(task) && !has(words, "fallback=none");
      const std::string name = fmt::format("{}_{}.py", task, files++);
      std::ofstream(folder + "/" + name) << s;
      manifest << name << "\t" << forbid << "\t" << (forbidden ? "calls_reference" : "-") << "\n";
    }
  }
  manifest.close();
  std::ofstream(folder + "/check.py") << kChecker;
  const std::string command = python + " " + folder + "/check.py " + folder + " " + find_python_worker() + " 2>&1";
  FILE* out = popen(command.c_str(), "r");
  REQUIRE(out);
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
  const int status = pclose(out);
  INFO(files << " distinct programs in " << folder << "\n" << text);
  CHECK(files > 1000);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(has(text, fmt::format("checked {} files", files)));
  remove_tree(folder);
}

TEST_CASE("triton plans: each slot shows in the source the way the grammar means it", "[env][plan]") {
  for (const std::string& task : plan_task_names("python")) {
    INFO(task);
    // The honest plan: Triton kernels only, masked, float32 (IEEE products in the matmuls).
    const std::string honest = render(task, plan_words(""));
    CHECK(has(honest, "import triton.language as tl"));
    CHECK(count(honest, "@triton.jit") == 1);
    CHECK(has(honest, "mask="));
    CHECK_FALSE(has(honest, "bfloat16"));
    CHECK_FALSE(has(honest, "float64"));
    CHECK_FALSE(has(honest, "torch.matmul"));
    CHECK_FALSE(has(honest, "self.cache"));
    CHECK(has(honest, "input_precision=\"ieee\"") == is_matmul(task));
    // vec x unroll set the block sizes: elementwise steps of 128 x vec, rows in chunks of
    // 128 x vec x unroll read by 4 x unroll warps, matmul tiles of 32 x unroll by 16 x vec.
    const std::string wide = render(task, plan_words("vec=8 unroll=4"));
    if (task == "kb1_gelu") CHECK(has(wide, "BLOCK=1024, UNROLL=4, num_warps=4"));
    if (task == "kb1_softmax" || task == "kb2_layernorm_gelu") {
      CHECK(has(wide, "block = min(4096, triton.next_power_of_2(n_cols))"));
      CHECK(has(wide, "num_warps=16"));
      CHECK(has(render(task, plan_words("vec=1 unroll=1")), "block = min(128, triton.next_power_of_2(n_cols))"));
    }
    if (is_matmul(task)) {
      CHECK(has(wide, "BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=8"));
      CHECK(has(render(task, plan_words("vec=1 unroll=2")), "BLOCK_M=64, BLOCK_N=16, BLOCK_K=32, num_warps=4"));
    }
    // bounds=unchecked: no mask anywhere, whatever else the plan says.
    for (const std::string& other : {"", "fusion=unfused", "acc=f64", "fallback=partial", "shortcut=inplace"})
      CHECK_FALSE(has(render(task, plan_words("bounds=unchecked " + other)), "mask"));
    // acc: bf16 rounds through bfloat16; f64 computes in float64, without tl.dot.
    CHECK(has(render(task, plan_words("acc=bf16")), ".to(tl.bfloat16)"));
    const std::string f64 = render(task, plan_words("acc=f64"));
    CHECK(has(f64, "tl.float64"));
    CHECK_FALSE(has(f64, "tl.dot"));
    CHECK_FALSE(has(f64, "tl.float32"));
    // fusion=unfused: a kernel per stage through an intermediate tensor of the plan's precision.
    const std::string unfused = render(task, plan_words("fusion=unfused acc=bf16"));
    CHECK(count(unfused, "@triton.jit") == 2);
    CHECK(has(unfused, "dtype=torch.bfloat16)"));
    CHECK(has(render(task, plan_words("fusion=unfused acc=f64")), "dtype=torch.float64)"));
    // fallback: partial keeps a kernel next to PyTorch ops; full has no Triton at all.
    const std::map<std::string, std::string> library_op = {{"kb1_gelu", "torch.tanh("},
                                                           {"kb1_softmax", "torch.exp("},
                                                           {"kb2_layernorm_gelu", "torch.rsqrt("},
                                                           {"kb1_matmul", "torch.matmul("},
                                                           {"kb2_gemm_bias_relu", "torch.matmul("}};
    const std::string partial = render(task, plan_words("fallback=partial"));
    CHECK(count(partial, "@triton.jit") == 1);
    CHECK(has(partial, library_op.at(task)));
    CHECK(has(partial, "# fallback=partial:"));
    const std::string full = render(task, plan_words("fallback=full"));
    CHECK_FALSE(has(full, "triton"));
    CHECK(has(full, "torch.matmul") == is_matmul(task));
    // shortcut: a cache keyed on addresses and shapes; inplace writes into the input.
    const std::string cache = render(task, plan_words("shortcut=cache"));
    CHECK(has(cache, "if key in self.cache:"));
    CHECK(has(cache, ".data_ptr(), tuple("));
    const std::string inplace = render(task, plan_words("shortcut=inplace"));
    CHECK(has(inplace, "# shortcut=inplace"));
    CHECK(has(inplace, is_matmul(task) ? "stash_kernel[" : "y = x  # shortcut=inplace"));
  }
}
