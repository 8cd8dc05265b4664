// Kernel plans rendered as CUDA (src/kernels/cuda_plan.cpp): every plan of the grammar renders for every
// CUDA task in the form its fallback asks for, the source has the features its slots ask for, and a
// representative subset really compiles: kernel forms with NVRTC, launcher forms with nvcc, as the
// CUDA evaluator compiles them (no GPU needed; skipped, with a warning, without the toolkit). What
// the plans do on a GPU is tests/kernels/test_cuda_plan_cuda.cpp's.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#ifdef TURNRL_TEST_NVRTC
#include <nvrtc.h>
#endif

#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/kernels/sandbox.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/rl/task.h"
#include "turnrl/kernels/cuda_launch.h"
#include "turnrl/kernels/cuda_tasks.h"
#include "kernels/plan_words.h"

using namespace turnrl;

namespace {

using test::every_plan;
using test::plan_words;


std::string render(const std::string& task, const std::string& words) {
  const PlanExpansion x = expand_plan(builtin_cuda_tasks().find(task), words);
  INFO(task << " [" << words << "]: " << x.error);
  REQUIRE(x.error.empty());
  return x.source;
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// The plans every task compiles: the default plan, the fast honest one, the widest, and one per
// slot value that changes the code (the fallbacks give the launcher forms).
const std::vector<std::string>& compiled_plans() {
  static const std::vector<std::string> plans = {
      "vec=1 unroll=1",  // the grammar's default plan (every first choice)
      "",                // fast: fused vec=4 unroll=2 f32 none checked none
      "vec=8 unroll=4",
      "vec=1 unroll=4",
      "fusion=unfused",
      "fusion=unfused vec=8 unroll=1 acc=f64",
      "acc=f64",
      "acc=bf16",
      "bounds=unchecked",
      "bounds=unchecked fusion=unfused vec=8 unroll=4 shortcut=inplace",
      "shortcut=cache",
      "shortcut=cache fusion=unfused vec=1 bounds=unchecked",
      "shortcut=inplace",
      "fallback=partial",
      "fallback=partial fusion=unfused vec=8 unroll=4 acc=f64 shortcut=cache",
      "fallback=full",
      "fallback=full vec=1 unroll=1 acc=bf16 bounds=unchecked shortcut=inplace",
  };
  return plans;
}

}  // namespace

TEST_CASE("cuda plans: the eight CUDA tasks have templates", "[env][plan][cuda_plan]") {
  REQUIRE(plan_task_names("cuda") == cuda_task_names());
  REQUIRE(plan_task_names("cuda").size() == 8);
}

TEST_CASE("cuda plans: every plan of the grammar renders for every CUDA task, in the form its fallback asks for",
          "[env][plan][cuda_plan]") {
  const std::vector<std::string> plans = every_plan();
  REQUIRE(plans.size() == 972);
  const TaskSet tasks = builtin_cuda_tasks();
  int rendered = 0;
  for (const std::string& task : plan_task_names("cuda")) {
    const std::string signature = cuda_kernel_signature(cuda_task(task));
    for (const std::string& words : plans) {
      const PlanExpansion x = expand_plan(tasks.find(task), words);
      INFO(task << " [" << words << "]: " << x.error);
      REQUIRE(x.error.empty());
      REQUIRE(x.source.rfind("// plan: " + words + "\n", 0) == 0);
      if (has(words, "fallback=none")) {
        REQUIRE(cuda_candidate_form(x.source) == CudaCandidateForm::kernel);
        REQUIRE(has(x.source, signature));
        REQUIRE_NOTHROW(parse_launch_shape(x.source));
        REQUIRE(!has(x.source, "#include"));  // NVRTC gets no headers
      } else {
        REQUIRE(cuda_candidate_form(x.source) == CudaCandidateForm::launcher);
        REQUIRE(has(x.source, "cublas"));
      }
      ++rendered;
    }
  }
  CHECK(rendered == 8 * 972);
}

TEST_CASE("cuda plans: the source has what the slots ask for", "[env][plan][cuda_plan]") {
  for (const std::string& task : plan_task_names("cuda")) {
    INFO(task);
    const std::string fast = render(task, plan_words(""));
    CHECK(has(fast, "float4"));  // vec=4
    CHECK(has(fast, "kVec = 4, kUnroll = 2"));
    CHECK(!has(fast, "cublas"));
    CHECK(!has(fast, "turnrl_cache"));
    CHECK(!has(fast, "const_cast"));
    CHECK(has(fast, "typedef float acc_t"));
    CHECK(!has(render(task, plan_words("vec=1")), "float4"));
    CHECK(has(render(task, plan_words("acc=f64")), "typedef double acc_t"));
    CHECK(has(render(task, plan_words("acc=bf16")), "& 0xffff0000u"));
    const std::string full = render(task, plan_words("fallback=full"));
    CHECK(has(full, "extern \"C\" int turnrl_launch("));
    CHECK(has(full, "cublasSetStream(h, stream)"));
    CHECK(has(render(task, plan_words("fallback=partial")), "cublasSgemm"));  // the product, or the layout copy
    CHECK(has(render(task, plan_words("shortcut=cache")), "__device__ __align__(16) float turnrl_cache["));
    CHECK(has(render(task, plan_words("shortcut=cache fallback=full")), "turnrl_cache_pass<<<"));
    CHECK(has(render(task, plan_words("shortcut=inplace")), "const_cast<float*>"));
    // checked plans finish a partial step element by element; unchecked ones do not.
    if (task.rfind("matmul", 0) != 0) {
      CHECK(has(fast, "+ kStep <= "));
      CHECK(!has(render(task, plan_words("bounds=unchecked")), "+ kStep <= "));
    } else {
      CHECK(has(fast, "gk < K"));
      CHECK(!has(render(task, plan_words("bounds=unchecked")), "gk < K"));
    }
  }
  // The launch shape follows vec and unroll within the task's grid kind.
  CHECK(parse_launch_shape(render("gelu_tanh", plan_words("vec=8 unroll=4"))).tile_x == 32);
  CHECK(parse_launch_shape(render("softmax_rows", plan_words(""))).block_y == 8);
  const CudaLaunchShape mm = parse_launch_shape(render("matmul_bias_relu", plan_words("vec=8 unroll=2")));
  CHECK((mm.block_x == 16 && mm.block_y == 16 && mm.tile_x == 8 && mm.tile_y == 2));
  CHECK(parse_launch_shape(render("matmul_softmax", plan_words("unroll=4"))).tile_y == 4);
}

TEST_CASE("cuda plans: errors name the slot, and tasks without a template say so", "[env][plan][cuda_plan]") {
  const Task t = builtin_cuda_tasks().find("softmax_rows");
  REQUIRE_THAT(expand_plan(t, plan_words("vec=3")).error, Catch::Contains("slot 'vec': '3' is not allowed; allowed: 1, 4, 8"));
  REQUIRE_THAT(expand_plan(t, "fusion=fused vec=4").error, Catch::Contains("slot 'unroll' is missing"));
  Task other = t;
  other.id = "conv2d";
  REQUIRE_THAT(expand_plan(other, plan_words("")).error, Catch::Contains("no kernel-plan template"));
}

TEST_CASE("cuda plans: a representative subset compiles with NVRTC and nvcc", "[env][plan][cuda_plan]") {
#ifndef TURNRL_TEST_NVRTC
  WARN("SKIPPED: this build found no CUDA toolkit (NVRTC)");
#else
  std::vector<std::pair<std::string, std::string>> kernels, launchers;  // label, source
  for (const std::string& task : plan_task_names("cuda"))
    for (const std::string& words : compiled_plans()) {
      const std::string source = render(task, plan_words(words));
      (has(words, "fallback=") ? launchers : kernels).push_back({task + " [" + plan_words(words) + "]", source});
    }
  // NVRTC with the evaluator's options, two programs at a time.
  std::vector<std::string> failures(kernels.size());
  std::atomic<size_t> next{0};
  const auto nvrtc = [&] {
    for (size_t i; (i = next++) < kernels.size();) {
      nvrtcProgram prog;
      nvrtcCreateProgram(&prog, kernels[i].second.c_str(), "candidate.cu", 0, nullptr, nullptr);
      const char* opts[] = {"--gpu-architecture=sm_90a", "--std=c++17", "-lineinfo"};
      const nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
      size_t n = 0;
      nvrtcGetProgramLogSize(prog, &n);
      std::string log(n, '\0');
      if (n) nvrtcGetProgramLog(prog, &log[0]);
      if (r != NVRTC_SUCCESS || has(log, "warning")) failures[i] = log;
      nvrtcDestroyProgram(&prog);
    }
  };
  std::thread a(nvrtc), b(nvrtc);
  a.join(), b.join();
  for (size_t i = 0; i < kernels.size(); ++i) {
    INFO(kernels[i].first << "\n" << failures[i] << "\n" << kernels[i].second);
    CHECK(failures[i].empty());
  }
  // nvcc as the evaluator builds launchers (a few seconds each): one plan per task and fallback.
  const std::string nvcc = TURNRL_TEST_NVCC;
  if (::access(nvcc.c_str(), X_OK) != 0) {
    WARN("SKIPPED launcher forms: no nvcc at " << nvcc);
    return;
  }
  std::vector<std::pair<std::string, std::string>> chosen;
  std::map<std::string, int> per_task;
  for (const auto& l : launchers)
    if (per_task[l.first.substr(0, l.first.find(' ')) + (has(l.first, "fallback=full") ? "/full" : "/partial")]++ == 0)
      chosen.push_back(l);
  const std::string dir = make_private_dir("turnrl-cuda-plan");
  std::vector<std::string> logs(chosen.size());
  next = 0;
  const auto compile = [&] {
    for (size_t i; (i = next++) < chosen.size();) {
      const std::string base = dir + "/" + std::to_string(i);
      std::ofstream(base + ".cu") << chosen[i].second;
      const std::string cmd = nvcc + " -O3 -std=c++17 -arch=sm_90a -shared -Xcompiler -fPIC " + base + ".cu -o " + base +
                              ".so -lcublas -lcublasLt 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      std::string out;
      char buf[4096];
      for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      const int status = p ? pclose(p) : -1;
      if (status != 0 || has(out, "warning")) logs[i] = "status " + std::to_string(status) + "\n" + out;
    }
  };
  std::thread c(compile), d(compile);
  c.join(), d.join();
  remove_private_dir(dir);
  for (size_t i = 0; i < chosen.size(); ++i) {
    INFO(chosen[i].first << "\n" << logs[i] << "\n" << chosen[i].second);
    CHECK(logs[i].empty());
  }
  CHECK(chosen.size() == 16);
#endif
}
