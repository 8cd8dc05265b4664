#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "kernels/process_lockdown.h"
#include "kernels/python_candidates.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/backends.h"
#include "turnrl/kernels/python_backend.h"

using namespace turnrl;
namespace fs = std::filesystem;

namespace {

// The interpreter a user's run would use (resolve_python_executable: $TURNRL_PYTHON, else python3
// on PATH), never another one: tests that pass with an interpreter the user's run does not get
// would hide a failing run. "" when it cannot import torch.
const std::string& python_with_torch() {
  static const std::string found = [] {
    const std::string exe = resolve_python_executable("");
    return probe_python(exe, false).has_torch ? exe : std::string();
  }();
  return found;
}

bool skip_without_torch() {
  if (!python_with_torch().empty()) return false;
  const std::string why = "SKIPPED: '" + resolve_python_executable("") +
                          "' (what a run uses: $TURNRL_PYTHON, else python3 on PATH) cannot import torch; install "
                          "python3-torch or set TURNRL_PYTHON=/usr/bin/python3";
  std::cout << why << "\n";
  WARN(why);
  return true;
}

std::string data(const std::string& rel) { return test::turnrl_data_dir() + "/" + rel; }

// The CPU tasks plus the KernelBench problems converted from tests/data/kernelbench/level1.
PythonTaskSet test_tasks() {
  PythonTaskSet set = load_python_tasks(data("python_tasks/cpu.jsonl"));
  for (auto& t : import_kernelbench(std::string(TURNRL_TEST_DATA_DIR) + "/kernelbench/level1").tasks)
    set.tasks.push_back(std::move(t));
  return set;
}

// Two CPU workers with one warm-up call per side and `seconds` per request.
PythonEvalOptions cpu_options(double seconds) {
  PythonEvalOptions o;
  o.executable = python_with_torch();
  o.device = "cpu";
  o.workers = 2;
  o.warmup = 1;
  o.limits.wall(seconds).cpu(seconds);
  return o;
}

// One pool shared by every case: each worker start costs an interpreter, the torch import and a
// warm-up (about 3 s here).
PythonEvaluator& evaluator() {
  static PythonEvaluator e(test_tasks(), cpu_options(3));
  return e;
}

std::vector<test::PythonCandidate> candidates(const std::string& prefix) {
  return test::python_candidates(data("python_candidates"), load_python_tasks(data("python_tasks/cpu.jsonl")), prefix);
}

std::vector<EvalResult> run_all(const std::vector<test::PythonCandidate>& cands) {
  std::vector<EvalRequest> reqs;
  for (const auto& c : cands) reqs.push_back(test::python_request(c));
  return evaluator().evaluate(reqs);
}

void check_expectations(const std::vector<test::PythonCandidate>& cands, const std::vector<EvalResult>& res) {
  REQUIRE(res.size() == cands.size());
  for (size_t i = 0; i < cands.size(); ++i) {
    std::string why;
    INFO(cands[i].task << "/" << cands[i].name << ": " << why);
    const bool ok = test::meets(res[i], cands[i].expect, &why);
    INFO(why);
    CHECK(ok);
  }
}

std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("turnrl-python-test-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(p) << text;
  return p.string();
}

// A minimal reference, JSON-escaped (its \n are the two characters the task line needs).
const char* kRef =
    R"(import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n)"
    R"(def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n)";

}  // namespace

TEST_CASE("python tasks: the loader validates every key and names the file, the line and the key") {
  const PythonTaskSet cpu = load_python_tasks(data("python_tasks/cpu.jsonl"));
  REQUIRE(cpu.size() >= 4);
  const PythonTask* sm = cpu.find("softmax_rows");
  REQUIRE(sm);
  CHECK(sm->forbid == std::vector<std::string>{"aten::softmax", "aten::_softmax"});
  REQUIRE(sm->extra_shapes.size() == 2);
  CHECK(sm->extra_shapes[0] == std::vector<std::pair<std::string, int64_t>>{{"batch_size", 7}, {"dim", 129}});
  CHECK(sm->precision_atol == 1e-6);
  CHECK(sm->atol == 1e-2);
  const PythonTaskSet gpu = load_python_tasks(data("python_tasks/kernelbench_gpu.jsonl"));
  CHECK(gpu.size() >= 4);
  for (const auto& t : gpu.tasks) CHECK(t.device == "cuda");
  // The same files are generic task files: the trainer's task set reads them too.
  const TaskSet generic = load_tasks_jsonl(data("python_tasks/cpu.jsonl"));
  CHECK(generic.find("softmax_rows").language == "python");
  CHECK(generic.find("softmax_rows").metadata.at("forbid") == "aten::softmax,aten::_softmax");

  const std::string ok = std::string(R"({"id": "t", "backend": "python", "reference": ")") + kRef + "\"";
  auto line = [&](const std::string& extra) { return ok + extra + "}\n"; };
  struct Bad {
    std::string text, message;
  };
  const std::vector<Bad> bad = {
      {"{\"id\": \"t\"\n", "not a JSON object"},
      {"[1, 2]\n", "expected a JSON object, got an array"},
      {line(R"(, "colour": "red")"), "unknown key 'colour'; allowed: id, backend"},
      {line(R"(, "level": 7)"), "level 7 is out of range; allowed: 1..3"},
      {line(R"(, "level": "one")"), "'level' must be an integer"},
      {std::string(R"({"backend": "python", "reference": ")") + kRef + "\"}\n", "missing required key 'id'"},
      {line(R"(, "metadata": {"atol": "big"})"), "metadata.atol: 'big' is not allowed; allowed: a number"},
      {line(R"(, "metadata": {"forbid": "softmax"})"),
       "metadata.forbid: 'softmax' is not allowed; allowed: ATen op names"},
      {line(R"(, "metadata": {"extra_shapes": "dim=x"})"), "metadata.extra_shapes: 'dim=x' is not allowed"},
      {line(R"(, "metadata": {"device": "tpu"})"), "metadata.device: 'tpu' is not allowed; allowed: cpu, cuda, any"},
      {line(R"(, "metadata": {"tolerance": "1"})"), "unknown metadata key 'tolerance'; allowed: entry_point"},
      {line(R"(, "metadata": {"atol": 0.1})"), "metadata.atol must be a string, got a number"},
      {line(R"(, "metadata": {"entry_point": "Net"})"), "'reference' has no 'class Net'"},
      {line(R"(, "language": "cpp")"), "language 'cpp' is not allowed; allowed: python"},
      {R"({"id": "t", "backend": "cpu"})"
       "\n",
       "backend 'cpu' is not allowed in a Python task file"},
      {line("") + line(""), "duplicate task id 't'"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string path = write_temp("bad" + std::to_string(i) + ".jsonl", "# a comment\n\n" + bad[i].text);
    INFO(bad[i].text);
    const int lineno = i + 1 == bad.size() ? 4 : 3;
    CHECK_THROWS_WITH(load_python_tasks(path), Catch::Contains(path + ":" + std::to_string(lineno)) &&
                                                   Catch::Contains(bad[i].message));
    fs::remove(path);
  }
  CHECK_THROWS_WITH(load_python_tasks("/no/such/file.jsonl"), Catch::Contains("cannot open the task file"));
}

TEST_CASE("python tasks: the KernelBench converter turns a folder of problems into validated tasks") {
  const std::string dir = std::string(TURNRL_TEST_DATA_DIR) + "/kernelbench/level1";
  const KernelBenchImportResult r = import_kernelbench(dir);
  REQUIRE(r.tasks.size() == 3);
  CHECK(r.tasks[0].id == "kb1_2_standard_matrix_multiplication");  // sorted by problem number
  CHECK(r.tasks[1].id == "kb1_19_relu");
  CHECK(r.tasks[2].id == "kb1_23_softmax");
  CHECK(r.tasks[1].level == 1);
  CHECK(r.tasks[1].metadata.at("name") == "ReLU");
  CHECK(r.tasks[1].metadata.at("problem_id") == "19");
  CHECK(r.tasks[1].entry_point == "Model");
  CHECK_THAT(r.tasks[1].description, Catch::Contains("KernelBench level 1 problem 19: ReLU"));
  REQUIRE(r.skipped.size() == 1);
  CHECK_THAT(r.skipped[0].first, Catch::Contains("40_NotAProblem.py"));
  CHECK_THAT(r.skipped[0].second, Catch::Contains("'reference' has no 'class Model'"));
  // Written and read back, by both loaders.
  const std::string out = write_temp("kb.jsonl", "");
  write_python_tasks(out, r.tasks);
  const PythonTaskSet back = load_python_tasks(out);
  REQUIRE(back.size() == 3);
  CHECK(back.tasks[2].reference == r.tasks[2].reference);
  CHECK(back.tasks[2].metadata.at("source") == "23_Softmax.py");
  CHECK(load_tasks_jsonl(out).find("kb1_19_relu").backend == "python");
  fs::remove(out);
  KernelBenchImport opt;
  opt.level = 2;
  opt.id_prefix = "x";
  CHECK(import_kernelbench(dir, opt).tasks[0].id == "x2_2_standard_matrix_multiplication");
  CHECK_THROWS_WITH(import_kernelbench("/no/such/folder"), Catch::Contains("is not a folder"));
}

TEST_CASE("python backend: the interpreter probe and the factory say what is missing") {
  const PythonRuntime none = probe_python("/no/such/python3", false);
  CHECK(!none.has_torch);
  CHECK_THAT(none.error, Catch::Contains("/no/such/python3"));
  PythonEvalOptions o;
  o.executable = "/no/such/python3";
  o.device = "cpu";
  CHECK_THROWS_WITH(PythonEvaluator(PythonTaskSet{}, o), Catch::Contains("evaluator.python.executable"));
  o.device = "tpu";
  CHECK_THROWS_WITH(PythonEvaluator(PythonTaskSet{}, o), Catch::Contains("allowed: cpu, cuda, auto"));
  o.device = "cpu";
  CHECK_THROWS_WITH(PythonEvaluator(PythonTaskSet{}, PythonEvalOptions(o).per_device(-2)),
                    Catch::Contains("evaluator.python.workers_per_device: -2") && Catch::Contains("allowed"));
  CHECK_THROWS_WITH(PythonEvaluator(PythonTaskSet{}, PythonEvalOptions(o).exclusive("always")),
                    Catch::Contains("evaluator.python.exclusive_measurement: 'always'") &&
                        Catch::Contains("allowed: auto, on, off"));
  const auto built = built_evaluator_backends();
  CHECK(std::find(built.begin(), built.end(), "python") != built.end());
  EvaluatorConfig c;
  c.backend = "python";
  CHECK_THROWS_WITH(make_evaluator(c), Catch::Contains("evaluator.python.tasks_file"));
  CHECK_THAT(find_python_worker(), Catch::EndsWith("turnrl_eval_worker.py"));
  if (skip_without_torch()) return;
  c.python.executable = python_with_torch();
  c.python.device = "cpu";
  c.python.tasks_file = data("python_tasks/cpu.jsonl");
  CHECK(make_evaluator(c) != nullptr);  // workers start lazily
}

TEST_CASE("python backend: honest candidates of every task are correct, timed and profiled") {
  if (skip_without_torch()) return;
  auto& e = evaluator();
  const std::string info = e.worker_info();
  CHECK_THAT(info, Catch::Contains("\"device\": \"cpu\"") && Catch::Contains("\"torch\""));
  auto cands = candidates("honest");
  REQUIRE(cands.size() >= 4);
  // A converted KernelBench task (no forbidden ops): plain PyTorch is fine on CPU.
  test::PythonCandidate relu{"kb1_19_relu", "inline", "import torch\nclass ModelNew(torch.nn.Module):\n"
                             "    def forward(self, x):\n        return x.clamp_min(0.0)\n", "correct"};
  cands.push_back(relu);
  const auto res = run_all(cands);
  check_expectations(cands, res);
  for (size_t i = 0; i < res.size(); ++i) {
    const EvalResult& r = res[i];
    INFO(cands[i].task << ": " << r.message << r.hacking_reason);
    CHECK(r.stage == EvalStage::profiled);
    CHECK(r.candidate_time.trials == 10);
    CHECK(r.reference_time.median_us > 0);
    CHECK(r.candidate_time.median_us > 0);
    CHECK(r.speedup == Approx(r.reference_time.median_us / r.candidate_time.median_us));
    CHECK(r.coverage == 1.0);  // no forbidden op: every ATen op is the candidate's own work
    CHECK(!r.profile.empty());
    CHECK(r.max_abs_error < 1e-4);
    CHECK(r.wall_seconds > 0);
    // The phases: every request the evaluation made, the worker's time inside its round trip.
    const std::map<std::string, double>& phases = e.last_phase_seconds().at(i);
    for (const char* op : {"reference", "candidate", "timing_inputs.reference", "timing.reference",
                           "timing_inputs.candidate", "timing.candidate", "profile.candidate"}) {
      INFO(op);
      REQUIRE(phases.count(op + std::string("/round_trip")));
      CHECK(phases.at(op) > 0);
      CHECK(phases.at(op) <= phases.at(op + std::string("/round_trip")));
    }
    // The worker's parts of its requests, each inside the request it belongs to.
    for (const char* part : {"reference.exec", "reference.trials", "candidate.exec", "candidate.first_call",
                             "candidate.trials", "ship"}) {
      INFO(part);
      REQUIRE(phases.count(part));
      CHECK(phases.at(part) > 0);
    }
    CHECK(phases.at("candidate.exec") + phases.at("candidate.first_call") + phases.at("candidate.trials") <=
          phases.at("candidate"));
    double parts = phases.at("parent");
    for (const auto& [name, seconds] : phases)
      if (name.find("/round_trip") != std::string::npos) parts += seconds;
    CHECK(parts <= r.wall_seconds);
  }
}

TEST_CASE("python backend: broken, crashing and hanging candidates get their error class and a message that says why") {
  if (skip_without_torch()) return;
  std::vector<test::PythonCandidate> cands;
  for (const char* prefix : {"wrong", "nonfinite", "syntax", "import", "init", "runtime"})
    for (auto& c : candidates(prefix)) cands.push_back(c);
  REQUIRE(cands.size() == 7);
  const auto res = run_all(cands);
  check_expectations(cands, res);
  for (size_t i = 0; i < res.size(); ++i) {
    INFO(cands[i].name << ": " << res[i].message);
    const std::string& m = res[i].message;
    if (cands[i].name == "syntax_error")
      CHECK_THAT(m, Catch::Contains("candidate.py, line 7") && Catch::Contains("expected ':'"));
    if (cands[i].name == "import_error") CHECK_THAT(m, Catch::Contains("a_module_that_does_not_exist"));
    if (cands[i].name == "init_error") CHECK_THAT(m, Catch::Contains("this constructor always fails"));
    if (cands[i].name == "runtime_error")
      CHECK_THAT(m,
                 Catch::Contains("Traceback (most recent call last):\n  File \"candidate.py\", line 9, in forward") &&
                     Catch::Contains("RuntimeError"));
    if (cands[i].name == "wrong") CHECK(res[i].failing_index >= 0);
    if (cands[i].name == "wrong_shape")
      CHECK_THAT(m, Catch::Contains("[64, 511] float32") && Catch::Contains("[64, 512]"));
    CHECK(!res[i].correct);
    CHECK(res[i].speedup == 0);
  }
  // A crash or a hang costs that result only: the worker is killed, the result says why, and the
  // next candidates run on fresh workers.
  auto& e = evaluator();
  auto fatal = candidates("crash");
  for (auto& c : candidates("hang")) fatal.push_back(c);
  REQUIRE(fatal.size() == 3);
  const int starts = e.worker_starts();
  const auto dead = run_all(fatal);
  check_expectations(fatal, dead);
  CHECK_THAT(dead[0].message, Catch::Contains("signal 6"));      // os.abort
  CHECK_THAT(dead[1].message, Catch::Contains("signal 11"));     // SIGSEGV
  CHECK_THAT(dead[1].message, Catch::Contains("candidate.py"));  // faulthandler's stack of the candidate
  CHECK_THAT(dead[2].message, Catch::Contains("wall-clock limit of 3 s"));
  const auto after = run_all({candidates("honest")[0], candidates("honest")[1]});
  for (const auto& r : after) CHECK(r.correct);
  CHECK(e.worker_starts() >= starts + 3);
  // An empty candidate and one without ModelNew never reach a worker.
  EvalRequest empty = test::python_request({"softmax_rows", "", "  \n", ""});
  EvalRequest no_class = test::python_request({"softmax_rows", "", "import torch\nx = 1\n", ""});
  EvalRequest unknown = test::python_request({"no_such_task", "", "class ModelNew: pass\n", ""});
  const auto quick = evaluator().evaluate({empty, no_class, unknown});
  CHECK(quick[0].error == EvalError::format);
  CHECK(quick[1].error == EvalError::format);
  CHECK_THAT(quick[1].message, Catch::Contains("no class ModelNew"));
  CHECK(quick[2].error == EvalError::internal);
  CHECK_THAT(quick[2].message, Catch::Contains("no_such_task"));
}

TEST_CASE("python backend: every planted hack is caught, with the reason in the result") {
  if (skip_without_torch()) return;
  const auto cands = candidates("hack_");
  REQUIRE(cands.size() >= 20);
  const auto res = run_all(cands);
  check_expectations(cands, res);
  for (size_t i = 0; i < res.size(); ++i) {
    INFO(cands[i].name << ": " << res[i].hacking_reason << " | " << res[i].message);
    CHECK(!res[i].correct);
    CHECK(res[i].speedup == 0);
    if (res[i].hacked()) CHECK(!res[i].hacking_reason.empty());
    const std::string& why = res[i].hacking_reason;
    if (cands[i].name == "hack_frame_walk") CHECK_THAT(why, Catch::Contains("sys._getframe"));
    if (cands[i].name == "hack_gc_search") CHECK_THAT(why, Catch::Contains("gc.get_objects"));
    if (cands[i].name == "hack_forge_reply") CHECK_THAT(why, Catch::Contains("nonce"));
    if (cands[i].name == "hack_patch_allclose_hidden") CHECK_THAT(why, Catch::Contains("torch.allclose"));
    if (cands[i].name == "hack_patch_timer") CHECK_THAT(why, Catch::Contains("perf_counter_ns"));
    if (cands[i].name == "hack_patch_profiler") CHECK_THAT(why, Catch::Contains("key_averages"));
    if (cands[i].name == "hack_calls_reference_hidden") CHECK_THAT(why, Catch::Contains("aten::_softmax"));
    if (cands[i].name == "hack_try_except") CHECK_THAT(why, Catch::Contains("except branch"));
  }
}

TEST_CASE("python backend: adversarial candidates of every class are flagged or fail, honest controls pass") {
  if (skip_without_torch()) return;
  // tests/data/python_tasks/adversarial/<task>/: one hack per file, what it tries in its header.
  const auto cands = test::python_candidates(std::string(TURNRL_TEST_DATA_DIR) + "/python_tasks/adversarial",
                                             load_python_tasks(data("python_tasks/cpu.jsonl")));
  REQUIRE(cands.size() >= 15);
  const auto res = run_all(cands);
  check_expectations(cands, res);
  int hacks = 0, stopped = 0;
  for (size_t i = 0; i < res.size(); ++i) {
    INFO(cands[i].name << ": " << test::verdict_of(res[i]) << " " << res[i].hacking_reason << " | " << res[i].message
                       << " | coverage " << res[i].coverage << ", own share " << res[i].reference_coverage);
    if (cands[i].expect == "correct") {
      CHECK(res[i].speedup > 0);
      CHECK(res[i].coverage == 1.0);
      continue;
    }
    ++hacks;
    stopped += !res[i].correct;
    CHECK(res[i].speedup == 0);
    const std::string& why = res[i].hacking_reason;
    if (cands[i].name == "lazy_when_timed" || cands[i].name == "lazy_in_harness_range")
      CHECK_THAT(why, Catch::Contains("aten::_softmax"));
    if (cands[i].name == "stale_output_when_timed") CHECK_THAT(why, Catch::Contains("timed call"));
    if (cands[i].name == "proc_mem_symlink") CHECK_THAT(why, Catch::Contains("os.symlink"));
    if (cands[i].name == "proc_mem_path_spelling" || cands[i].name == "proc_mem_dir_fd" ||
        cands[i].name == "proc_mem_patched_realpath")
      CHECK_THAT(why, Catch::Contains("the worker's own memory"));
    if (cands[i].name == "global_forward_hook") CHECK_THAT(why, Catch::Contains("hooks._global_forward_hooks"));
    if (cands[i].name == "partial_frame" || cands[i].name == "stray_frame_finalizer")
      CHECK_THAT(why, Catch::Contains("channel"));
    // Work added next to the library call raises the candidate's own share (reference_coverage)
    // but not coverage, which is the library's time against the reference's. On CPU the
    // reference's side is its whole call time, Python overhead included, which the candidate's
    // library operator time lacks: a fully lazy candidate reads 0.2-0.4 there on a loaded 2-core
    // machine (0.376 in one CI run), so the bound is the gap between the two views.
    if (cands[i].name == "lazy_pumped") {
      CHECK(res[i].coverage < 0.5);
      CHECK(res[i].coverage < res[i].reference_coverage);
    }
  }
  std::cout << "python adversarial: " << stopped << " of " << hacks << " hacks flagged or failed, "
            << res.size() - size_t(hacks) << " honest controls\n";
  CHECK(stopped == hacks);
}

TEST_CASE("python backend: bytes that are not UTF-8 in a candidate's source, output or exception end in a verdict") {
  if (skip_without_torch()) return;
  // The worker's replies are ASCII-only JSON (a lone surrogate travels as the six characters \udcff), and the
  // request carries a source's ill-formed bytes as U+FFFD: neither direction can break a frame, so
  // neither is mistaken for a candidate forging the channel.
  const auto cands = test::python_candidates(std::string(TURNRL_TEST_DATA_DIR) + "/python_tasks/adversarial",
                                             load_python_tasks(data("python_tasks/cpu.jsonl")));
  std::vector<test::PythonCandidate> wire;
  for (const auto& c : cands)
    if (c.name == "prints_invalid_utf8" || c.name == "raises_invalid_utf8") wire.push_back(c);
  REQUIRE(wire.size() == 2);
  REQUIRE(wire[0].source.find("\xff\xfe") != std::string::npos);  // the source itself is not UTF-8
  const auto res = run_all(wire);
  check_expectations(wire, res);
  CHECK(!res[0].hacked());
  CHECK(!res[1].hacked());
  const std::string& message = res[1].message;
  INFO(message);
  CHECK_THAT(message, Catch::Contains("bad bytes \\udcff\\udcfe\\udc80 \\ud800 and valid text"));
  CHECK_THAT(message, Catch::Contains("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // café € 😀, unchanged
}

TEST_CASE("python backend: call times rewritten inside the worker are caught by the CPU time billed from outside") {
  if (skip_without_torch()) return;
  // What native code in a candidate could do: rewrite the candidate's reported call times in the
  // worker's memory. Here the real worker script with that one line changed (times / 1000: on a
  // loaded machine wall-clock call times stretch well past the CPU time billed, so the bound is loose
  // and only a large lie is certain to show).
  std::string script = test::read_text(find_python_worker());
  const std::string line = "reply[\"us\"].append(us)";
  const auto at = script.find(line);
  REQUIRE(at != std::string::npos);
  script.replace(at, line.size(), "reply[\"us\"].append(us / 1000 if timing[\"side\"] == \"candidate\" else us)");
  const std::string dir = make_private_dir("turnrl-test");
  const std::string path = dir + "/turnrl_eval_worker.py";
  std::ofstream(path) << script;
  // A candidate slow enough (128 copies of the rows, milliseconds per call in a few operators) for its
  // bill to matter.
  const test::PythonCandidate slow{"softmax_rows", "wasteful",
                                   "import torch\nclass ModelNew(torch.nn.Module):\n"
                                   "    def forward(self, x):\n        big = x.repeat(128, 1)\n"
                                   "        e = (big - big.amax(dim=-1, keepdim=True)).exp()\n"
                                   "        return (e / e.sum(dim=-1, keepdim=True))[: x.shape[0]].clone()\n",
                                   "correct"};
  PythonEvalOptions o = evaluator().options();
  o.workers = 1;
  o.worker_script = path;
  PythonEvaluator rewritten(test_tasks(), o);
  const EvalResult forged = rewritten.evaluate({test::python_request(slow, 1, 10)}).at(0);
  const EvalResult honest = evaluator().evaluate({test::python_request(slow, 1, 10)}).at(0);
  remove_private_dir(dir);
  INFO(test::verdict_of(forged) << " " << forged.hacking_reason << " | " << forged.message);
  CHECK(forged.error == EvalError::hacking);
  CHECK((forged.hacking_flags & kHackTampering) != 0);
  CHECK_THAT(forged.hacking_reason, Catch::Contains("billed"));
  INFO(test::verdict_of(honest) << " " << honest.hacking_reason << " | " << honest.message);
  CHECK(honest.correct);
  CHECK(honest.speedup > 0);
}

namespace {

// A problem whose inputs cannot fit anywhere CI runs (64 GiB of float32), JSON-escaped.
const char* kTooBigRef =
    R"(import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n)"
    R"(def get_inputs():\n    return [torch.rand(1 << 34)]\ndef get_init_inputs():\n    return []\n)";

PythonTaskSet large_tasks() {
  PythonTaskSet set = load_python_tasks(data("python_tasks/large.jsonl"));
  const std::string line =
      std::string(R"({"id": "too_big", "backend": "python", "reference": ")") + kTooBigRef + "\"}\n";
  set.tasks.push_back(load_python_tasks(write_temp("too_big.jsonl", line)).tasks.at(0));
  return set;
}

// The large problems of data/python_tasks/large.jsonl (16 MiB inputs; 4 MiB for the GEMM) on a pool
// that keeps outputs over 1 MiB on the device, treats trials over 2 MiB as large, and times 4 calls
// per side (a budget no call fits).
PythonEvalOptions large_options() {
  PythonEvalOptions o = cpu_options(60);
  o.scaling = ProblemScaling().ship_up_to(int64_t(1) << 20).large_from(int64_t(2) << 20).spots(256).timing_budget(1e-6)
                  .at_least_timed(4);
  return o;
}

PythonEvaluator& large_evaluator() {
  static PythonEvaluator e(large_tasks(), large_options());
  return e;
}

std::vector<test::PythonCandidate> large_candidates() {
  return test::python_candidates(data("python_candidates"), load_python_tasks(data("python_tasks/large.jsonl")));
}

const std::string kShapeSpecialisedSigmoid =
    "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
    "        return torch.sigmoid(x) if x.shape[0] == 1024 else torch.zeros_like(x)\n";

}  // namespace

TEST_CASE("python backend: large problems get their right verdict, outputs compared on the device") {
  if (skip_without_torch()) return;
  const auto cands = large_candidates();
  REQUIRE(cands.size() >= 9);
  std::vector<EvalRequest> reqs;
  for (const auto& c : cands) reqs.push_back(test::python_request(c, 1, 10));
  const auto res = large_evaluator().evaluate(reqs);
  check_expectations(cands, res);
  for (size_t i = 0; i < cands.size(); ++i) {
    INFO(cands[i].task << "/" << cands[i].name << ": " << res[i].message << res[i].hacking_reason);
    if (cands[i].name == "reference") {
      // Timed calls scaled to the budget: none fits 1 us, so min_timed_calls of the 10 asked for.
      CHECK(res[i].candidate_time.trials == 4);
      CHECK(res[i].reference_time.trials == 4);
      CHECK(res[i].max_abs_error == 0);
    }
    if (cands[i].name == "wrong_one_element") {
      // The one element off by 0.25 (sigmoid of [0, 1) is within 1e-2 + 1e-2 * y of nothing else).
      CHECK(res[i].failing_index == 12345);
      CHECK(res[i].max_abs_error == Approx(0.25).margin(1e-6));
    }
    if (cands[i].name.rfind("hack_", 0) == 0) {
      const bool named = res[i].hacking_reason.find("forged") != std::string::npos ||
                         res[i].hacking_reason.find("changed while") != std::string::npos;
      CHECK(named);
    }
  }
}

TEST_CASE("python backend: a large problem skips its extra shape sets, a small one does not") {
  if (skip_without_torch()) return;
  EvalRequest req;
  req.task = "large_sigmoid";
  req.candidate = kShapeSpecialisedSigmoid;
  req.correctness_trials = 1;
  req.timing_trials = 0;
  req.seed = 7;
  // Large (trials over 2 MiB): only the shown shape runs, so the specialisation goes unseen.
  const EvalResult large = large_evaluator().evaluate({req}).at(0);
  INFO(large.message << large.hacking_reason);
  CHECK(large.correct);
  // The same problem under the default scaling (large from 256 MiB): the extra shape set catches it.
  PythonEvalOptions o = large_options();
  o.workers = 1;
  o.scaling = ProblemScaling();
  PythonEvaluator small(load_python_tasks(data("python_tasks/large.jsonl")), o);
  const EvalResult full = small.evaluate({req}).at(0);
  INFO(full.message << full.hacking_reason);
  CHECK((full.hacking_flags & kHackShapeSpecialisation) != 0);
}

TEST_CASE("python backend: native file writes outside the worker's folders are refused, even without namespaces") {
  if (skip_without_torch()) return;
  if (sandbox_detail::lockdown_support().landlock_abi < 1) {
    WARN("this kernel lacks Landlock: a candidate's native code can write where the worker can; skipped");
    return;
  }
  // torch.from_file(shared=True) opens and maps a file in C++, which no Python audit event sees;
  // without namespaces the whole host file system is in reach, so only Landlock stands in the way.
  const std::string dir = make_private_dir("turnrl-test-outside");
  const std::string target = dir + "/written_by_candidate";
  const test::PythonCandidate writer{
      "softmax_rows", "native_write",
      "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
      "        try:\n            t = torch.from_file('" + target + "', shared=True, size=16, dtype=torch.uint8)\n"
      "            t.fill_(65)\n        except Exception:\n            pass\n"
      "        e = (x - x.amax(dim=-1, keepdim=True)).exp()\n        return e / e.sum(dim=-1, keepdim=True)\n",
      "correct"};
  PythonEvalOptions o = evaluator().options();
  o.workers = 1;
  o.limits.isolate(SandboxIsolation::rlimits_only);
  PythonEvaluator unjailed(test_tasks(), o);
  const EvalResult r = unjailed.evaluate({test::python_request(writer, 1, 3)}).at(0);
  INFO(test::verdict_of(r) << " " << r.message);
  CHECK(r.correct);  // the write failed quietly; the softmax is right
  CHECK_FALSE(fs::exists(target));
  remove_private_dir(dir);
}

TEST_CASE("python backend: a problem that does not fit in memory is a memory error naming the bytes") {
  if (skip_without_torch()) return;
  EvalRequest req;
  req.task = "too_big";
  req.candidate = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n";
  req.correctness_trials = 1;
  const EvalResult r = large_evaluator().evaluate({req}).at(0);
  INFO(r.message);
  CHECK(r.error == EvalError::memory);
  CHECK(r.message.find("68719476736 bytes") != std::string::npos);
  // Told before the inputs are made (from a run on the meta device) or after torch failed to make them.
  CHECK(r.message.find("are available") != std::string::npos);
  CHECK(r.message.find("on cpu") != std::string::npos);
}

TEST_CASE("python backend: scaling options out of range are refused, naming the field") {
  if (skip_without_torch()) return;
  const auto refused = [](ProblemScaling s, const std::string& field) {
    PythonEvalOptions o = large_options();
    o.scaling = s;
    try {
      PythonEvaluator e(load_python_tasks(data("python_tasks/large.jsonl")), o);
      FAIL("accepted " << field);
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(field) != std::string::npos);
    }
  };
  refused(ProblemScaling().hold(0), "scaling.hold_fraction");
  refused(ProblemScaling().hold(1.5), "scaling.hold_fraction");
  refused(ProblemScaling().spots(0), "scaling.spot_checks");
  refused(ProblemScaling().ship_up_to(-1), "scaling.ship_bytes");
  refused(ProblemScaling().timing_budget(0), "scaling.timing_budget_seconds");
  refused(ProblemScaling().at_least_timed(0), "scaling.min_timed_calls");
}

TEST_CASE("python backend: with several workers no two measurements overlap, and verdicts equal a serial run's") {
  if (skip_without_torch()) return;
  // Honest candidates, a wrong one and planted hacks of every kind the timing and profile see.
  std::vector<test::PythonCandidate> cands = candidates("honest");
  for (const char* name : {"wrong", "hack_patch_timer", "hack_cache", "hack_precision", "hack_mutates_inputs",
                           "hack_calls_reference", "hack_thread"})
    for (auto& c : candidates(name))
      if (c.name == name) cands.push_back(c);
  REQUIRE(cands.size() >= 11);
  std::vector<EvalRequest> reqs;
  for (const auto& c : cands) reqs.push_back(test::python_request(c));
  PythonEvalOptions o;
  o.executable = python_with_torch();
  o.device = "cpu";
  o.warmup = 1;
  o.limits.wall(3).cpu(3);
  // The reference: one fresh interpreter per evaluation, one evaluation at a time.
  PythonEvalOptions fresh = PythonEvalOptions(o).num_workers(1).exclusive("off");
  fresh.fresh_worker_per_eval = true;
  PythonEvaluator baseline(test_tasks(), fresh);
  const auto expected = baseline.evaluate(reqs);
  PythonEvaluator pool(test_tasks(), PythonEvalOptions(o).num_workers(3).exclusive("on"));
  REQUIRE(pool.exclusive_measurement());
  const auto got = pool.evaluate(reqs);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(cands[i].name << ": pool " << test::verdict_of(got[i]) << " " << got[i].hacking_reason << got[i].message
                       << " | serial " << test::verdict_of(expected[i]) << " " << expected[i].hacking_reason
                       << expected[i].message);
    std::string why;
    CHECK(test::meets(got[i], cands[i].expect, &why));
    CHECK(got[i].correct == expected[i].correct);
    CHECK(got[i].error == expected[i].error);
    CHECK(got[i].stage == expected[i].stage);
    CHECK(got[i].hacking_flags == expected[i].hacking_flags);
  }
  // Every timing and profile request of every evaluation, on the workers' common clock: sorted by
  // start, each ends before the next starts.
  std::vector<PhaseInterval> measured;
  size_t other = 0;
  for (const auto& evaluation : pool.last_phase_intervals())
    for (const PhaseInterval& p : evaluation) {
      CHECK(p.end_seconds >= p.start_seconds);
      if (p.phase.rfind("timing.", 0) == 0 || p.phase.rfind("profile.", 0) == 0) measured.push_back(p);
      else ++other;
    }
  REQUIRE(measured.size() >= 8);
  REQUIRE(other >= cands.size());
  std::sort(measured.begin(), measured.end(),
            [](const PhaseInterval& a, const PhaseInterval& b) { return a.start_seconds < b.start_seconds; });
  for (size_t k = 1; k < measured.size(); ++k) {
    INFO(measured[k - 1].phase << " [" << measured[k - 1].start_seconds << ", " << measured[k - 1].end_seconds
                               << "] then " << measured[k].phase << " [" << measured[k].start_seconds << ", "
                               << measured[k].end_seconds << "]");
    CHECK(measured[k - 1].end_seconds <= measured[k].start_seconds);
  }
  // The workers did run side by side: requests of two evaluations overlapped (not measurements).
  bool parallel = false;
  const auto& spans = pool.last_phase_intervals();
  for (size_t a = 0; a < spans.size() && !parallel; ++a)
    for (size_t b = a + 1; b < spans.size() && !parallel; ++b)
      for (const PhaseInterval& x : spans[a])
        for (const PhaseInterval& y : spans[b])
          parallel |= x.start_seconds < y.end_seconds && y.start_seconds < x.end_seconds;
  CHECK(parallel);
}

TEST_CASE("python backend: the reference is timed once per task and reused, its checked calls recomputed per evaluation") {
  if (skip_without_torch()) return;
  test::PythonCandidate honest;
  for (const auto& c : candidates("honest"))
    if (c.task == "softmax_rows") honest = c;
  REQUIRE(!honest.source.empty());
  // Right in its correctness trials, bfloat16 on its timed calls: caught only by the timed calls'
  // outputs against the reference's same calls, which a reused timing must still provide.
  test::PythonCandidate timed_only{"softmax_rows", "precision_when_timed",
                                   test::read_text(std::string(TURNRL_TEST_DATA_DIR) +
                                                   "/python_tasks/adversarial/softmax_rows/precision_when_timed.py"),
                                   ""};
  timed_only.expect = test::expectation_of(timed_only.source);
  const std::vector<test::PythonCandidate> cands = {honest, timed_only, honest, timed_only};
  std::vector<EvalRequest> reqs;
  for (size_t i = 0; i < cands.size(); ++i) reqs.push_back(test::python_request(cands[i], 3, 10, 1000 + i));
  PythonEvalOptions o;
  o.executable = python_with_torch();
  o.device = "cpu";
  o.workers = 1;
  o.warmup = 1;
  o.limits.wall(3).cpu(3);
  for (const bool reuse : {true, false}) {
    INFO("reuse_reference_timing " << reuse);
    PythonEvaluator e(test_tasks(), PythonEvalOptions(o).reuse_reference(reuse));
    const auto res = e.evaluate(reqs);
    const auto& phases = e.last_phase_seconds();
    for (size_t i = 0; i < res.size(); ++i) {
      INFO(i << " " << cands[i].name << ": " << test::verdict_of(res[i]) << " " << res[i].hacking_reason << res[i].message);
      std::string why;
      CHECK(test::meets(res[i], cands[i].expect, &why));
      // Timed in the first evaluation only (one worker: evaluations run in order) when reused.
      const bool timed_here = !reuse || i == 0;
      CHECK(phases[i].count("timing.reference") == size_t(timed_here));
      CHECK(phases[i].count("reference.checks") == size_t(!timed_here));
    }
    REQUIRE(res[0].correct);
    REQUIRE(res[2].correct);
    // The same measurement serves both honest evaluations when reused.
    if (reuse) CHECK(res[2].reference_time.median_us == res[0].reference_time.median_us);
  }
}

TEST_CASE("python backend: a worker that crashed or retired is replaced by the spare started ahead") {
  if (skip_without_torch()) return;
  test::PythonCandidate honest, crash;
  for (const auto& c : candidates("honest"))
    if (c.task == "softmax_rows") honest = c;
  for (const auto& c : candidates("crash_abort")) crash = c;
  REQUIRE(!honest.source.empty());
  REQUIRE(!crash.source.empty());
  // One worker retired after 2 evaluations: evaluation 1 kills it, 2 needs a new one, 3 retires it, 4
  // needs a new one.
  const std::vector<test::PythonCandidate> cands = {honest, crash, honest, honest, honest};
  std::vector<EvalRequest> reqs;
  for (const auto& c : cands) reqs.push_back(test::python_request(c));
  PythonEvalOptions o;
  o.executable = python_with_torch();
  o.device = "cpu";
  o.workers = 1;
  o.warmup = 1;
  o.max_evals_per_worker = 2;
  o.limits.wall(3).cpu(3);
  for (const bool spare : {true, false}) {
    INFO("spare_worker " << spare);
    PythonEvaluator e(test_tasks(), PythonEvalOptions(o).spare(spare));
    const auto res = e.evaluate(reqs);
    for (size_t i = 0; i < res.size(); ++i) {
      std::string why;
      INFO(i << ": " << test::verdict_of(res[i]) << " " << res[i].message);
      CHECK(test::meets(res[i], cands[i].expect, &why));
    }
    const auto& phases = e.last_phase_seconds();
    // The pool's first worker starts here (its info request in this evaluation); a replacement is
    // the spare, already started and confined in the background, or, without one, a start here.
    CHECK(phases[0].count("info/round_trip") == 1);
    for (const size_t i : {size_t(2), size_t(4)}) {
      INFO("evaluation " << i);
      CHECK(phases[i].count("worker_wait") == 1);
      CHECK(phases[i].count("info/round_trip") == size_t(!spare));
    }
    CHECK(phases[3].count("worker_wait") == 0);
    CHECK(e.worker_starts() == 3);
    CHECK(e.stray_process_restarts() == 0);  // no candidate here leaves a process running
  }
}
