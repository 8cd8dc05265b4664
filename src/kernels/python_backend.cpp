#include "turnrl/kernels/python_backend.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "syscall_filter.h"
#include "trial_seeds.h"
#include "turnrl/core/error.h"
#include "turnrl/core/hash.h"
#include "turnrl/core/install_paths.h"
#include "turnrl/kernels/cpu_backend.h"
#include "turnrl/kernels/cpu_tasks.h"
#include "turnrl/rl/metrics.h"

namespace turnrl {
namespace fs = std::filesystem;

namespace {

constexpr int kTamperExit = 86;  // the worker's audit hook stopped it (python/turnrl_eval_worker.py)

// A lenient view of a worker reply's JSON: a member that is absent, or of another type than the
// one asked for, reads as null, "", 0 or false. What a reply must hold is checked where it is used
// (a frame without the request's nonce is refused before anything else is read).
class Field {
 public:
  explicit Field(const nlohmann::json& node) : node_(&node) {}
  Field operator[](const char* key) const {
    if (!node_->is_object()) return Field(null_node());
    const auto it = node_->find(key);
    return it == node_->end() ? Field(null_node()) : Field(*it);
  }
  std::vector<Field> items() const {
    std::vector<Field> out;
    if (node_->is_array())
      for (const auto& item : *node_) out.emplace_back(item);
    return out;
  }
  bool is_object() const { return node_->is_object(); }
  bool is_number() const { return node_->is_number(); }
  std::string str() const { return node_->is_string() ? node_->get<std::string>() : std::string(); }
  double num(double fallback = 0) const { return node_->is_number() ? node_->get<double>() : fallback; }
  int64_t integer() const {
    if (node_->is_number_integer()) return node_->get<int64_t>();
    const double v = num(0);
    return std::isfinite(v) && std::abs(v) < 9e18 ? int64_t(v) : 0;
  }
  bool truthy() const { return node_->is_boolean() ? node_->get<bool>() : !node_->is_null(); }
  // An array of numbers (other items read as 0).
  std::vector<double> numbers() const {
    std::vector<double> out;
    for (const Field& f : items()) out.push_back(f.num(0));
    return out;
  }

 private:
  static const nlohmann::json& null_node() {
    static const nlohmann::json null;
    return null;
  }
  const nlohmann::json* node_;
};

std::string trim_to(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n) + fmt::format("\n[... {} more bytes]", s.size() - n);
  return s;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string random_nonce() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}", rd(), rd(), rd());
}

// One output tensor as shipped by the worker: dtype, shape, values as float32 and how many elements
// carry the NaN pattern the worker writes into the reference's freed outputs. An output too large to
// ship (ProblemScaling::ship_bytes) is "kept" on the worker's device instead: the candidate's then
// carries the worker's verdicts and the elements at places drawn after its call, and both sides carry
// the reference's elements at places drawn when the reference ran (raw bytes, compared bit for bit).
struct Output {
  std::string dtype;
  std::vector<int64_t> shape;
  at::Tensor values;
  int64_t poisoned = 0;
  bool kept = false;
  std::vector<Comparison> verdicts;        // the worker's, one per tolerance sent (task's, then precision's)
  at::Tensor spot_index, spot_cand, spot_ref;  // int64 flat places and the float32 values there
  std::string reference_spots;             // raw bytes of the reference at the places drawn when it ran
};

// Which of the tolerances sent to the worker (kTaskTolerance, kPrecisionTolerance) a comparison uses.
struct Tolerance {
  double atol, rtol;
  size_t verdict;
};
constexpr size_t kTaskTolerance = 0, kPrecisionTolerance = 1;

at::ScalarType scalar_type(const std::string& dtype) {
  static const std::map<std::string, at::ScalarType> types = {
      {"float32", at::kFloat}, {"float64", at::kDouble}, {"float16", at::kHalf}, {"bfloat16", at::kBFloat16},
      {"int64", at::kLong},    {"int32", at::kInt},      {"int16", at::kShort}, {"int8", at::kChar},
      {"uint8", at::kByte},    {"bool", at::kBool}};
  auto it = types.find(dtype);
  if (it == types.end())
    fail(
        "output dtype '{}' is not supported; allowed: float32, float64, float16, bfloat16, int64, "
        "int32, int16, int8, uint8, bool",
        dtype);
  return it->second;
}

template <typename W>
int64_t count_word(const char* p, size_t nbytes, W pattern) {
  int64_t n = 0;
  for (size_t i = 0; i + sizeof(W) <= nbytes; i += sizeof(W)) {
    W w;
    std::memcpy(&w, p + i, sizeof w);
    n += w == pattern;
  }
  return n;
}

int64_t count_poison(const std::string& dtype, const char* p, size_t nbytes) {
  if (dtype == "float32") return count_word<uint32_t>(p, nbytes, 0x7FC07E57u);
  if (dtype == "float16") return count_word<uint16_t>(p, nbytes, 0x7E57u);
  if (dtype == "bfloat16") return count_word<uint16_t>(p, nbytes, 0x7FD7u);
  if (dtype == "float64") return count_word<uint64_t>(p, nbytes, 0x7FF800007E577E57ull);
  return 0;
}

std::string raw_bytes(Field desc, const std::string& blob) {
  const auto offset = size_t(desc["offset"].integer()), nbytes = size_t(desc["nbytes"].integer());
  require(offset <= blob.size() && nbytes <= blob.size() - offset,
          "python worker protocol: output bytes past the end of the reply");
  return blob.substr(offset, nbytes);
}

at::Tensor decode_tensor(Field desc, const std::string& blob, std::vector<int64_t>* shape_out = nullptr) {
  std::vector<int64_t> shape;
  for (const Field s : desc["shape"].items()) shape.push_back(s.integer());
  const std::string raw = raw_bytes(desc, blob);
  at::Tensor t = at::empty(shape, at::TensorOptions(scalar_type(desc["dtype"].str())));
  require(size_t(t.numel()) * t.element_size() == raw.size(),
          "python worker protocol: output size does not match its shape");
  if (!raw.empty()) std::memcpy(t.data_ptr(), raw.data(), raw.size());
  if (shape_out) *shape_out = shape;
  return t;
}

// [finite, within, max abs error, max rel error, first failing index or -1], as the worker sends it.
Comparison verdict_of(Field v) {
  const std::vector<Field> x = v.items();
  require(x.size() == 5, "python worker protocol: a device verdict has 5 items");
  Comparison c;
  c.finite = x[0].truthy(), c.within = x[1].truthy(), c.max_abs_error = x[2].num(), c.max_rel_error = x[3].num();
  c.failing_index = x[4].integer();
  return c;
}

std::vector<Output> decode_outputs(Field descs, const std::string& blob) {
  std::vector<Output> outs;
  for (const Field d : descs.items()) {
    Output o;
    o.dtype = d["dtype"].str();
    if (d["kept"].truthy()) {
      o.kept = true;
      for (const Field s : d["shape"].items()) o.shape.push_back(s.integer());
      scalar_type(o.dtype);  // refuses a dtype the parent cannot read
      for (const Field v : d["verdicts"].items()) o.verdicts.push_back(verdict_of(v));
      o.poisoned = d["poisoned"].integer();
      if (d["spot_index"].is_object()) o.spot_index = decode_tensor(d["spot_index"], blob).to(at::kLong);
      if (d["spot_cand"].is_object()) o.spot_cand = decode_tensor(d["spot_cand"], blob).to(at::kFloat).contiguous();
      if (d["spot_ref"].is_object()) o.spot_ref = decode_tensor(d["spot_ref"], blob).to(at::kFloat).contiguous();
      // The reference side ships its places' values as spot_ref; the candidate side reads them again.
      const Field again = d["ref_again"].is_object() ? d["ref_again"] : d["spot_ref"];
      if (again.is_object()) o.reference_spots = raw_bytes(again, blob);
      outs.push_back(std::move(o));
      continue;
    }
    const at::Tensor t = decode_tensor(d, blob, &o.shape);
    o.poisoned = count_poison(o.dtype, static_cast<const char*>(t.data_ptr()), size_t(t.numel()) * t.element_size());
    o.values = t.to(at::kFloat).contiguous();
    outs.push_back(std::move(o));
  }
  return outs;
}

// The verdict on a kept output: the worker's, unless the parent's own comparison of the elements at
// places drawn after the call disagrees (then those elements decide, at their flat places). What
// only a forged comparison explains goes to *forged (when not null and still empty): the reference's
// elements at the places drawn when it ran changed while the candidate ran, or the worker's verdict
// passed an output whose elements at places drawn after the call are wrong.
Comparison kept_verdict(size_t k, const Output& got, const Output& ref, const Tolerance& tol, std::string* forged) {
  require(got.kept && got.verdicts.size() > tol.verdict && got.spot_cand.defined() && got.spot_ref.defined() &&
              got.spot_cand.numel() == got.spot_ref.numel() && got.spot_index.numel() == got.spot_cand.numel(),
          "python worker protocol: a kept output lacks its verdicts or spot checks");
  Comparison c = got.verdicts[tol.verdict];
  const Comparison spot = compare_outputs(got.spot_cand.data_ptr<float>(), got.spot_ref.data_ptr<float>(),
                                          got.spot_cand.numel(), tol.atol, tol.rtol);
  if (forged && forged->empty()) {
    if (got.reference_spots != ref.reference_spots)
      *forged = fmt::format("output {}: the reference's output kept on the device changed while the candidate ran", k);
    else if (c.ok() && !spot.ok())
      *forged = fmt::format("output {}: the worker's comparison passed it, but element {} is {} where the reference has "
                            "{} (checked here at a place drawn after the call): the comparison was forged",
                            k, got.spot_index[spot.failing_index].item<int64_t>(),
                            got.spot_cand[spot.failing_index].item<float>(),
                            got.spot_ref[spot.failing_index].item<float>());
  }
  if (spot.ok()) return c;
  c.finite = c.finite && spot.finite;
  c.within = c.within && spot.within;
  c.max_abs_error = std::max(c.max_abs_error, spot.max_abs_error);
  c.max_rel_error = std::max(c.max_rel_error, spot.max_rel_error);
  if (c.failing_index < 0) c.failing_index = got.spot_index[spot.failing_index].item<int64_t>();
  return c;
}

std::string shape_text(const Output& o) { return fmt::format("[{}] {}", fmt::join(o.shape, ", "), o.dtype); }

// Compares every output of a call with the reference's; *problem says what differed first, and
// *forged (when not null) what only a forged comparison explains (kept_verdict).
Comparison compare_call(const std::vector<Output>& got, const std::vector<Output>& ref, const Tolerance& tol,
                        std::string* problem, std::string* forged = nullptr) {
  Comparison total;
  if (got.size() != ref.size()) {
    total.shape_ok = false;
    *problem = fmt::format("{} output tensor(s), the reference returns {}", got.size(), ref.size());
    return total;
  }
  std::vector<Comparison> parts;
  std::vector<int64_t> sizes;
  for (size_t k = 0; k < ref.size(); ++k) {
    if (got[k].shape != ref[k].shape || got[k].dtype != ref[k].dtype) {
      total.shape_ok = false;
      *problem = fmt::format("output {} is {}, the reference's is {}", k, shape_text(got[k]), shape_text(ref[k]));
      return total;
    }
    if (ref[k].kept) {
      sizes.push_back(std::accumulate(ref[k].shape.begin(), ref[k].shape.end(), int64_t(1), std::multiplies<>()));
      parts.push_back(kept_verdict(k, got[k], ref[k], tol, forged));
      continue;
    }
    sizes.push_back(ref[k].values.numel());
    parts.push_back(compare_outputs(got[k].values.data_ptr<float>(), ref[k].values.data_ptr<float>(), sizes.back(),
                                    tol.atol, tol.rtol));
  }
  return merge_in_order(parts, sizes);
}

bool float_outputs(const std::vector<Output>& ref) {
  return std::all_of(ref.begin(), ref.end(),
                     [](const Output& o) { return o.dtype == "float32" || o.dtype == "float64"; });
}

int64_t poisoned(const std::vector<Output>& outs) {
  int64_t n = 0;
  for (const auto& o : outs) n += o.poisoned;
  return n;
}

uint32_t flag_named(const std::string& name) {
  for (const auto& c : hacking_checks())
    if (name == c.name) return c.flag;
  return kHackTampering;
}

void add_worker_findings(Field findings, std::vector<HackFinding>& f) {
  for (const Field x : findings.items()) add_once(f, flag_named(x["flag"].str()), x["reason"].str());
}

std::string tamper_reason(const std::string& tail) {
  const std::string marker = "turnrl-worker: tampering: ";
  const auto p = tail.rfind(marker);
  if (p == std::string::npos) return "the worker's audit hook stopped the candidate";
  std::string reason = tail.substr(p + marker.size());
  return reason.substr(0, reason.find('\n'));
}

EvalError error_of(const Comparison& c) {
  if (!c.shape_ok) return EvalError::shape;
  if (!c.finite) return EvalError::nonfinite;
  return EvalError::mismatch;
}

double median(std::vector<double> v) { return timing_stats(std::move(v)).median_us; }

// Adds the seconds a scope of this process's own work took to one phase of the current evaluation.
class PhaseClock {
 public:
  PhaseClock(std::map<std::string, double>& phases, std::string name)
      : phases_(phases), name_(std::move(name)), started_(std::chrono::steady_clock::now()) {}
  ~PhaseClock() {
    phases_[name_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

 private:
  std::map<std::string, double>& phases_;
  std::string name_;
  std::chrono::steady_clock::time_point started_;
};

std::string read_all(FILE* f) {
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

enum class TrialKind { main, cache, shape };

using ShapeOverrides = std::vector<std::pair<std::string, int64_t>>;

// Two shape sets drawn for one evaluation, as the CPU backend draws them (random_check_size): one of
// primes up to a quarter above the shown sizes, one of odd sizes under 64. Only the constants that
// the task's own extra sets make odd somewhere (so odd sizes are valid for the task), with their
// shown value read from the reference's module-level `NAME = <int>`; none when there are none.
std::vector<ShapeOverrides> drawn_shape_sets(const PythonTask& task, uint64_t seed) {
  std::map<std::string, int64_t> shown;
  for (const auto& set : task.extra_shapes)
    for (const auto& [name, value] : set) {
      const std::regex assignment("(^|\\n)" + name + "[ \\t]*=[ \\t]*([0-9]+)[ \\t]*(#[^\\n]*)?(\\n|$)");
      std::smatch m;
      if (value % 2 == 1 && std::regex_search(task.reference, m, assignment)) shown[name] = std::stoll(m[2].str());
    }
  if (shown.empty()) return {};
  std::vector<ShapeOverrides> sets(2);
  for (int larger = 1; larger >= 0; --larger)
    for (const auto& [name, value] : shown)
      sets[size_t(1 - larger)].emplace_back(name, eval_detail::random_check_size(value, larger == 1, seed));
  return sets;
}

std::string shape_text(const ShapeOverrides& set) {
  std::string s;
  for (const auto& [name, value] : set) s += fmt::format("{}{}={}", s.empty() ? "" : ",", name, value);
  return s;
}

// ProblemScaling's timed calls per side: as many as fit the budget, each costing the reference's call
// time plus four passes over the trial's bytes at the device's copy bandwidth, within
// [min_timed_calls, requested].
int timed_calls(const ProblemScaling& s, int requested, double call_seconds, double trial_bytes, double bandwidth) {
  if (requested <= 0) return 0;
  const double per_call = call_seconds + (bandwidth > 0 ? 4 * trial_bytes / bandwidth : 0);
  if (!(per_call > 0)) return requested;
  const double fit = std::floor(s.timing_budget_seconds / per_call);
  return int(std::clamp<double>(fit, std::min(s.min_timed_calls, requested), requested));
}

}  // namespace

SandboxLimits PythonEvalOptions::default_limits() {
  SandboxLimits l;
  l.wall_seconds = l.cpu_seconds = 60;
  l.startup_seconds = 120;
  l.address_space_bytes = int64_t(16) << 30;
  l.file_bytes = int64_t(256) << 20;
  l.open_files = 1024;
  l.scratch_bytes = int64_t(2) << 30;  // Triton caches and extension builds live in the worker's tmpfs
  return l;
}

PythonRuntime probe_python(const std::string& executable, bool import_torch) {
  // No single quotes in the program: the shell command quotes it. Module path entries that are not
  // UTF-8 (decoded with surrogateescape: lone surrogates) have no JSON form and are left out.
  const std::string program = std::string(
      "import sys, json, importlib.util as u\n"
      "r = {\"executable\": sys.executable, "
      "\"path\": [p for p in sys.path if p and not any(0xD800 <= ord(c) < 0xE000 for c in p)], "
      "\"python\": sys.version.split()[0], \"torch\": u.find_spec(\"torch\") is not None, "
      "\"triton\": u.find_spec(\"triton\") is not None}\n") +
      (import_torch ? "try:\n"
                      "    import torch\n"
                      "    r[\"torch_version\"] = torch.__version__\n"
                      "    r[\"cuda\"] = bool(torch.cuda.is_available())\n"
                      "    r[\"gpus\"] = torch.cuda.device_count() if r[\"cuda\"] else 0\n"
                      "except Exception as e:\n"
                      "    r[\"error\"] = repr(e)\n"
                    : "") +
      "print(\"TURNRL_PROBE \" + json.dumps(r))\n";
  PythonRuntime rt;
  const std::string cmd = shell_quote(executable) + " -c " + shell_quote(program) + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) {
    rt.error = fmt::format("cannot run '{}'", executable);
    return rt;
  }
  const std::string out = read_all(f);
  const int status = pclose(f);
  const auto p = out.rfind("TURNRL_PROBE ");
  if (p == std::string::npos) {
    rt.error = fmt::format("'{}' did not run (exit status {}): {}", executable, WEXITSTATUS(status), trim_to(out, 400));
    return rt;
  }
  // A line that does not parse (an executable path that is not UTF-8) is reported, never thrown.
  const nlohmann::json probe = nlohmann::json::parse(out.substr(p + 13, out.find('\n', p) - p - 13), nullptr, false);
  if (probe.is_discarded()) {
    rt.error = fmt::format("'{}' printed a probe line that is not valid JSON: {}", executable, trim_to(out, 400));
    return rt;
  }
  const Field r(probe);
  rt.executable = r["executable"].str().empty() ? executable : r["executable"].str();
  for (const Field s : r["path"].items()) rt.sys_path.push_back(s.str());
  rt.python_version = r["python"].str();
  rt.has_torch = r["torch"].truthy();
  rt.has_triton = r["triton"].truthy();
  rt.torch_version = r["torch_version"].str();
  rt.cuda = r["cuda"].truthy();
  rt.gpus = int(r["gpus"].integer());
  rt.error = r["error"].str();
  return rt;
}

std::string resolve_python_executable(const std::string& configured) {
  if (!configured.empty()) return configured;
  const char* env = std::getenv("TURNRL_PYTHON");
  return env && *env ? env : "python3";
}

std::string find_python_worker() {
  if (const char* p = std::getenv("TURNRL_PYTHON_WORKER")) {
    if (::access(p, R_OK) == 0) return p;
    fail("TURNRL_PYTHON_WORKER: '{}' is not a readable file", p);
  }
  return find_turnrl_file(TurnrlFiles::data, "python/turnrl_eval_worker.py");
}

// ------------------------------------------------------------------------------------- evaluator

// What a reference runs in its profiled calls on CUDA: all its kernel time (the denominator of the
// candidate's coverage) and its kernels' names (never the candidate's own).
struct ReferenceProfile {
  double total_us = 0;
  std::string kernel_names;  // JSON strings, comma-separated
};

// What an evaluation needs of the reference's timing, measured in a clean worker (before any
// candidate ran in it) and reused per (task text, device name, timing plan) when
// reuse_reference_timing is on.
struct ReferenceTiming {
  TimingStats time;
  // What the timing request cost beyond its reported calls (billed CPU time on cpu, this process's
  // clock on cuda): the harness's cost, the yardstick for the candidate's bill; NaN when unreadable.
  double harness_seconds = std::nan("");
  double timing_bytes = 0;   // one call's inputs and outputs (cuda: the plausible-speed check)
  ReferenceProfile profile;  // cuda
};

// How many calls a task's timing makes and checks on a device (ProblemScaling), decided from the
// first evaluation's reference call time and size.
struct TimingPlan {
  int timed_calls = 0;
  int checks = 0;
  bool large = false;
};

struct PythonEvaluator::Impl {
  PythonTaskSet tasks;
  PythonEvalOptions opt;
  PythonRuntime runtime;
  std::string device, script;

  struct Slot {
    std::unique_ptr<SandboxWorker> worker;
    size_t device_index = 0;                   // cuda:<index> (its measurement lock); 0 on cpu
    int evals = 0;                             // evaluations since the worker started
    double bandwidth = 0;                      // the device's copy bandwidth, bytes/s (info)
    std::string info;                          // the last info reply
    int threads = 0;                           // cpu: the worker's threads once started (seen from outside)
    std::string device_name;                   // the info reply's (e.g. "NVIDIA H200", "cpu")
    std::map<std::string, double> phases;      // the current evaluation's seconds (last_phase_seconds)
    std::vector<PhaseInterval> intervals;      // the current evaluation's requests (last_phase_intervals)
  };
  std::vector<Slot> slots;
  std::vector<std::map<std::string, double>> phase_seconds;  // per request of the last evaluate()
  std::vector<std::vector<PhaseInterval>> phase_intervals;   // per request of the last evaluate()
  bool exclusive = false;                        // measurements hold their device's lock
  std::mutex reference_mutex;
  std::map<std::string, ReferenceTiming> reference_timings;  // reference_timing_key -> the first timing
  std::map<std::string, TimingPlan> timing_plans;            // timing_plan_key -> the first evaluation's
  std::vector<std::unique_ptr<std::mutex>> measure_locks;  // one per device
  // One per device: large problems (ProblemScaling) evaluate one at a time there, since each one's
  // kept trials hold a share of the device's memory that several at once would exceed.
  std::vector<std::unique_ptr<std::mutex>> large_problem_locks;

  struct Reply {
    nlohmann::json frame;  // the reply's JSON line
    Field head() const { return Field(frame); }
    std::string blob;
    // Measured here, outside the worker: what the request cost (NaN when it cannot be read).
    double billed_seconds = std::nan("");  // CPU time the kernel billed the worker's process
    double wall_seconds = 0;               // this process's clock around the round trip
  };
  // One request; false with r.error/message set when the call failed (the worker is then gone).
  // Its phases are recorded under `label` ("" = op).
  bool call(Slot& slot, const std::string& op, const std::string& body, Reply& reply, EvalResult& r,
            const std::string& label = "");
  // A timing or profile request of one side ("<op>.<side>"), holding the device's measurement lock
  // when measurements are exclusive. A timing request is preceded by a "timing_inputs" request that
  // makes and touches its inputs and the harness's buffers outside its bill: the billed loop then
  // allocates nothing of the inputs' size, so its cost around the calls does not depend on how the
  // worker's allocator happens to hand out memory (fresh pages cost a fault each; CI 2026-12-07: an
  // honest candidate billed 577.8 ms beyond the reference's 143.2 ms for the same loop). A failed
  // preparation is returned as the timing request's reply.
  bool measure(Slot& slot, const std::string& op, const char* side, const std::string& body, Reply& reply,
               EvalResult& r);
  EvalResult run(Slot& slot, const EvalRequest& req);
  // The reference's timing of `timing_body` (and its profile on cuda) in the slot's worker, kept
  // under `key` for later evaluations when reuse_reference_timing is on; false with `failure` saying
  // what failed. `checks`: the outputs of the checked calls.
  bool time_reference(Slot& slot, const PythonTask& task, const std::string& key, const std::string& timing_body,
                      int timing_trials, size_t num_checks, ReferenceTiming& timing,
                      std::vector<std::vector<Output>>& checks, std::string& failure);
  // The key of a reference timing: the hash of the task's text (reference and entry point: the timed
  // shape set is the one its get_inputs builds), the device's name and the timing plan.
  std::string reference_timing_key(const PythonTask& task, const Slot& slot, int timing_trials) const;
  // The key of a timing plan: the task's text, the device's name and the timed calls asked for.
  std::string timing_plan_key(const PythonTask& task, const Slot& slot, int asked_timing_trials) const;
  // A started, confined worker in the slot: the one it has, else the device's spare, else a new one.
  void ensure_info(Slot& slot);
  // Starts the slot's worker here and now: interpreter, imports, warm-up, info, confinement.
  void start_worker(Slot& slot);
  // Moves the device's spare worker into a slot whose worker is gone (waiting for it if it is still
  // starting) and starts the next spare; false when there is none to take.
  bool take_spare(Slot& slot);
  void start_spare(size_t device_index);  // the caller holds the device's spare mutex

  SandboxLimits worker_limits;
  std::vector<std::vector<std::string>> worker_args;  // per device
  std::unique_ptr<SandboxWorker> new_worker(size_t device_index) const {
    return std::make_unique<SandboxWorker>(runtime.executable, worker_args.at(device_index), worker_limits);
  }
  std::atomic<int> retired_starts{0};  // starts of workers that spares replaced
  std::atomic<int> stray_process_restarts{0};  // workers replaced for processes a candidate left running
  std::once_flag preload_warning;      // a worker that could not import torch._inductor, said once
  // Spare workers, one per device, started in the background so that replacing a worker that
  // faulted or retired costs no start. Declared last: destroyed first, waiting for a start under way.
  struct Spare {
    std::mutex mutex;
    std::future<std::unique_ptr<Slot>> ready;
  };
  std::vector<std::unique_ptr<Spare>> spares;
};

PythonEvaluator::PythonEvaluator(PythonTaskSet tasks, PythonEvalOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.tasks = std::move(tasks);
  m.opt = std::move(options);
  if (m.opt.device != "cpu" && m.opt.device != "cuda" && m.opt.device != "auto")
    fail("evaluator.python.device: '{}' is not allowed; allowed: cpu, cuda, auto", m.opt.device);
  const ProblemScaling& scale = m.opt.scaling;
  if (scale.ship_bytes < 0) fail("python evaluator scaling.ship_bytes: {} is not allowed; allowed: >= 0", scale.ship_bytes);
  if (scale.spot_checks < 1)
    fail("python evaluator scaling.spot_checks: {} is not allowed; allowed: >= 1", scale.spot_checks);
  if (scale.large_bytes < 0)
    fail("python evaluator scaling.large_bytes: {} is not allowed; allowed: >= 0", scale.large_bytes);
  if (!(scale.hold_fraction > 0 && scale.hold_fraction <= 1))
    fail("python evaluator scaling.hold_fraction: {} is not allowed; allowed: (0, 1]", scale.hold_fraction);
  if (!(scale.timing_budget_seconds > 0))
    fail("python evaluator scaling.timing_budget_seconds: {} is not allowed; allowed: > 0", scale.timing_budget_seconds);
  if (scale.min_timed_calls < 1)
    fail("python evaluator scaling.min_timed_calls: {} is not allowed; allowed: >= 1", scale.min_timed_calls);
  if (m.opt.workers < 0) fail("evaluator.workers: {} is not allowed; allowed: 0 (per device) or more", m.opt.workers);
  if (m.opt.workers_per_device < 0)
    fail("evaluator.python.workers_per_device: {} is not allowed; allowed: 0 (4 per GPU, one per core on cpu) or more",
         m.opt.workers_per_device);
  if (m.opt.exclusive_measurement != "auto" && m.opt.exclusive_measurement != "on" &&
      m.opt.exclusive_measurement != "off")
    fail("evaluator.python.exclusive_measurement: '{}' is not allowed; allowed: auto, on, off",
         m.opt.exclusive_measurement);
  const std::string executable = resolve_python_executable(m.opt.executable);
  m.runtime = probe_python(executable, m.opt.device != "cpu");
  const char* how = "set evaluator.python.executable (or $TURNRL_PYTHON) to an interpreter with PyTorch, e.g. "
                    "/usr/bin/python3 with Debian's python3-torch";
  if (m.runtime.executable.empty()) fail("evaluator.python.executable: {}; {}", m.runtime.error, how);
  if (!m.runtime.has_torch || !m.runtime.error.empty())
    fail("evaluator.python.executable: '{}' (Python {}) cannot import torch{}; {}", m.runtime.executable,
         m.runtime.python_version, m.runtime.error.empty() ? "" : ": " + m.runtime.error, how);
  m.device = m.opt.device == "auto" ? (m.runtime.cuda ? "cuda" : "cpu") : m.opt.device;
  if (m.device == "cuda" && !m.runtime.cuda)
    fail("evaluator.python.device: cuda, but torch {} in '{}' sees no GPU; allowed here: cpu, auto",
         m.runtime.torch_version, m.runtime.executable);
  if (m.device == "cuda" && !m.runtime.has_triton)
    fmt::print(stderr,
               "turnrl: warning: evaluator.python.executable '{}' cannot import triton: Triton candidates will fail "
               "to compile (CUDA ones are unaffected); set evaluator.python.executable or $TURNRL_PYTHON to an "
               "interpreter with triton\n",
               m.runtime.executable);
  m.script = m.opt.worker_script.empty() ? find_python_worker() : m.opt.worker_script;
  m.exclusive = m.opt.exclusive_measurement == "auto" ? m.device == "cuda" : m.opt.exclusive_measurement == "on";
  const int devices = m.device == "cuda" ? std::max(1, m.runtime.gpus) : 1;
  const int per_device = m.opt.workers_per_device > 0 ? m.opt.workers_per_device
                         : m.device == "cuda"         ? 4
                                                      : int(std::max(1u, std::thread::hardware_concurrency()));
  const int n = m.opt.workers > 0 ? m.opt.workers : devices * per_device;
  for (int d = 0; d < devices; ++d) {
    m.measure_locks.push_back(std::make_unique<std::mutex>());
    m.large_problem_locks.push_back(std::make_unique<std::mutex>());
  }
  SandboxLimits limits = m.opt.limits;
  require_sandbox(limits, "evaluator.sandbox");
  remove_stale_private_dirs();
  // What the interpreter needs to see: its installation, its module path and the worker script.
  for (const std::string& p : m.runtime.sys_path) limits.visible(p);
  limits.visible(fs::path(m.runtime.executable).parent_path().parent_path().string()).visible(m.script);
  // Shared compile caches the caller set up are the workers' to write (python_backend.h).
  for (const char* var : {"TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR"})
    if (const char* v = std::getenv(var)) limits.writable(v);
  if (m.device == "cuda") {
    limits.visible("/sys");
    for (const auto& e : fs::directory_iterator("/dev"))
      if (e.path().filename().string().rfind("nvidia", 0) == 0) limits.devices.push_back(e.path().string());
  }
  // The CUDA driver reserves hundreds of GiB of virtual address space per context: an address-space
  // limit makes context creation fail, so GPU workers run without one (memory is bounded by the GPU).
  if (m.device == "cuda") limits.address_space_bytes = std::numeric_limits<int64_t>::max();
  std::string path_json = "[";
  for (size_t i = 0; i < m.runtime.sys_path.size(); ++i)
    path_json += (i ? "," : "") + json_string(m.runtime.sys_path[i]);
  path_json += "]";
  for (int d = 0; d < devices; ++d) {
    const std::string dev = m.device == "cuda" ? fmt::format("cuda:{}", d) : "cpu";
    std::vector<std::string> args = {"-I", "-B", m.script, "--device", dev, "--path", path_json, "--flush-mib",
                                     fmt::format("{}", m.opt.l2_flush_mib)};
    // The sandbox gives workers a minimal environment; these are what torch, Triton and extension
    // builds need from the caller's.
    // TRITON_CACHE_DIR / TORCH_EXTENSIONS_DIR: unset, each worker compiles into its private directory
    // (no candidate can plant a binary for another); set, workers share compiled launchers and kernels.
    // torch.compile compiles in the worker itself: its default pool of compile processes would stay
    // running after the candidate that started it (a stray process, see finish() in run()).
    args.insert(args.end(), {"--env", "TORCHINDUCTOR_COMPILE_THREADS=1"});
    for (const char* var : {"PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "TRITON_PTXAS_PATH",
                            "TRITON_LIBCUDA_PATH", "TRITON_CUDART_PATH", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
                            "CC", "CXX", "TORCH_CUDA_ARCH_LIST"})
      if (const char* v = std::getenv(var)) args.insert(args.end(), {"--env", fmt::format("{}={}", var, v)});
    m.worker_args.push_back(std::move(args));
    m.spares.push_back(std::make_unique<Impl::Spare>());
  }
  m.worker_limits = limits;
  m.slots.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    m.slots[size_t(i)].device_index = size_t(i % devices);
    m.slots[size_t(i)].worker = m.new_worker(size_t(i % devices));
  }
}

PythonEvaluator::~PythonEvaluator() = default;

const PythonTaskSet& PythonEvaluator::tasks() const { return impl_->tasks; }
const PythonEvalOptions& PythonEvaluator::options() const { return impl_->opt; }
const std::string& PythonEvaluator::device() const { return impl_->device; }
const PythonRuntime& PythonEvaluator::runtime() const { return impl_->runtime; }
int PythonEvaluator::pool_size() const { return int(impl_->slots.size()); }
const std::vector<std::map<std::string, double>>& PythonEvaluator::last_phase_seconds() const {
  return impl_->phase_seconds;
}
const std::vector<std::vector<PhaseInterval>>& PythonEvaluator::last_phase_intervals() const {
  return impl_->phase_intervals;
}
bool PythonEvaluator::exclusive_measurement() const { return impl_->exclusive; }

int PythonEvaluator::stray_process_restarts() const { return impl_->stray_process_restarts.load(); }

int PythonEvaluator::worker_starts() const {
  int n = impl_->retired_starts;
  for (const auto& s : impl_->slots) n += s.worker->starts();
  return n;
}

std::string PythonEvaluator::worker_info() {
  impl_->ensure_info(impl_->slots.at(0));
  return impl_->slots[0].info;
}

void PythonEvaluator::Impl::ensure_info(Slot& slot) {
  if (slot.bandwidth > 0 && slot.worker->running()) return;
  PhaseClock wait(slot.phases, "worker_wait");
  if (!take_spare(slot)) start_worker(slot);
}

bool PythonEvaluator::Impl::take_spare(Slot& slot) {
  // A pool's first workers start side by side here; the baseline of a fresh interpreter per
  // evaluation pays its starts.
  if (!opt.spare_worker || opt.fresh_worker_per_eval) return false;
  Spare& spare = *spares.at(slot.device_index);
  std::lock_guard<std::mutex> lock(spare.mutex);
  const bool first_start = slot.worker->starts() == 0;
  if (!spare.ready.valid() || first_start) {
    if (!spare.ready.valid()) start_spare(slot.device_index);
    return false;
  }
  std::unique_ptr<Slot> ready;
  try {
    ready = spare.ready.get();
  } catch (const std::exception&) {  // it did not start: this slot starts one here and reports why
    start_spare(slot.device_index);
    return false;
  }
  start_spare(slot.device_index);
  retired_starts += slot.worker->starts();
  slot.worker = std::move(ready->worker);
  slot.bandwidth = ready->bandwidth;
  slot.info = std::move(ready->info);
  slot.device_name = std::move(ready->device_name);
  slot.threads = ready->threads;
  slot.evals = 0;
  return true;
}

void PythonEvaluator::Impl::start_spare(size_t device_index) {
  spares.at(device_index)->ready = std::async(std::launch::async, [this, device_index] {
    auto spare = std::make_unique<Slot>();
    spare->device_index = device_index;
    spare->worker = new_worker(device_index);
    start_worker(*spare);
    return spare;
  });
}

void PythonEvaluator::Impl::start_worker(Slot& slot) {
  slot.evals = 0;  // (an evaluation whose worker died counted for none)
  Reply reply;
  EvalResult r;
  if (!call(slot, "info", "", reply, r)) fail("python evaluator: the worker did not start: {}", r.message);
  slot.bandwidth = reply.head()["bandwidth"].num(0);
  slot.device_name = reply.head()["device_name"].str();
  // Torch's compiler stack imported at start-up, where a failure is the real cause: a later lazy
  // import in a request fails differently (state the first attempt left half-registered).
  if (const std::string why = reply.head()["preload_error"].str(); !why.empty())
    std::call_once(preload_warning, [&] {
      fmt::print(stderr,
                 "turnrl: warning: the Python worker could not import torch._inductor at start-up; references "
                 "and Triton candidates that use it will fail: {}\n",
                 why);
    });
  slot.info =
      fmt::format(R"({{"python": {}, "torch": {}, "triton": {}, "device": {}, "device_name": {}, "bandwidth": {}}})",
                  json_string(reply.head()["python"].str()), json_string(reply.head()["torch"].str()),
                  json_string(reply.head()["triton"].str()), json_string(reply.head()["device"].str()),
                  json_string(reply.head()["device_name"].str()), slot.bandwidth);
  // Before any candidate runs, a worker confines its file writes to its own folders (Landlock,
  // where the kernel has it: without namespaces it is what keeps a candidate's native code off the
  // host's files). A CPU worker also installs the candidate seccomp profile (no fork, exec,
  // threads, sockets; signals to the worker only), built here for the worker's own pid as it sees
  // it. CUDA workers cannot have that profile: Triton builds every kernel's launcher with the C
  // compiler, so they send no program ("bpf" empty) and keep the tool profile of the sandbox. Every
  // worker confines its writes, in the namespace jail too: its read-only mounts hold the host's
  // files there, but not /proc/self/mem, through which native code in a candidate (a load_inline
  // extension) could rewrite the checker's code; Landlock refuses opening it for writing. It holds
  // for the thread that runs candidate code and what that thread starts, not for the threads the
  // CUDA driver started before.
  std::string hex;
  if (device == "cpu") {
    auto filter = sandbox_detail::build_syscall_filter(sandbox_detail::FilterProfile::candidate,
                                                       pid_t(reply.head()["pid"].integer()));
    for (const sock_filter& f : filter.program)
      for (size_t k = 0; k < sizeof f; ++k) hex += fmt::format("{:02x}", reinterpret_cast<const uint8_t*>(&f)[k]);
  }
  Reply confined;
  if (!call(slot, "confine", fmt::format(R"("bpf": "{}", "seccomp_syscall": {})", hex, SYS_seccomp), confined, r) ||
      !confined.head()["confined"].truthy())
    fail("python evaluator: the worker could not confine itself (file writes{}): {}",
         device == "cpu" ? ", candidate seccomp profile" : "",
         r.message.empty() ? confined.head()["error"]["message"].str() : r.message);
  if (device == "cpu") slot.threads = slot.worker->thread_count();
}

bool PythonEvaluator::Impl::measure(Slot& slot, const std::string& op, const char* side, const std::string& body,
                                    Reply& reply, EvalResult& r) {
  const std::string label = op + "." + side;
  std::unique_lock<std::mutex> lock;
  if (exclusive) {  // preparing inputs on the device would disturb another worker's measurement too
    lock = std::unique_lock<std::mutex>(*measure_locks.at(slot.device_index), std::defer_lock);
    PhaseClock wait(slot.phases, "measure_wait");
    lock.lock();
  }
  if (op == "timing") {
    if (!call(slot, "timing_inputs", body, reply, r, "timing_inputs." + std::string(side))) return false;
    if (reply.head()["error"].is_object()) return true;
  }
  return call(slot, op, body, reply, r, label);
}

bool PythonEvaluator::Impl::call(Slot& slot, const std::string& op, const std::string& body, Reply& reply,
                                 EvalResult& r, const std::string& label_or_empty) {
  const std::string& label = label_or_empty.empty() ? op : label_or_empty;
  const std::string nonce = random_nonce();
  const std::string request = fmt::format(R"({{"op": {}, "nonce": {}{}{}}})", json_string(op), json_string(nonce),
                                          body.empty() ? "" : ", ", body);
  if (!slot.worker->running() && op != "info") ensure_info(slot);  // a fresh worker is confined first
  const bool was_running = slot.worker->running();
  const double billed_before = was_running ? slot.worker->billed_cpu_seconds() : std::nan("");
  const auto started = std::chrono::steady_clock::now();
  SandboxReply s = slot.worker->call(request);
  reply.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  reply.billed_seconds = slot.worker->billed_cpu_seconds() - billed_before;
  slot.phases[label + "/round_trip"] += reply.wall_seconds;
  if (!was_running) slot.threads = 0;  // a fresh worker: its thread count is taken after confinement
  const std::string tail = s.output_tail.empty() ? "" : "\noutput: " + s.output_tail;
  if (s.status != SandboxStatus::ok) {
    slot.evals = 0;
    if (s.status == SandboxStatus::bad_frame) {
      r.error = EvalError::hacking;
      r.hacking_flags |= kHackTampering;
      r.hacking_reason = "the worker's channel carried " + s.message + " (a frame the candidate wrote)";
      r.message = r.hacking_reason;
      return false;
    }
    if (s.status == SandboxStatus::crashed && s.exit_code == kTamperExit) {
      r.error = EvalError::hacking;
      r.hacking_flags |= kHackTampering;
      r.hacking_reason = tamper_reason(s.output_tail);
      r.message = "the worker stopped the candidate: " + r.hacking_reason;
      return false;
    }
    switch (s.status) {
      case SandboxStatus::crashed: r.error = EvalError::crash; break;
      case SandboxStatus::timeout: r.error = EvalError::timeout; break;
      case SandboxStatus::memory: r.error = EvalError::memory; break;
      case SandboxStatus::output_limit: r.error = EvalError::output_limit; break;
      default: r.error = EvalError::internal; break;
    }
    r.message = trim_to(fmt::format("the worker was killed and will be replaced ({}): {}{}", to_string(s.status),
                                    s.message, tail), opt.message_chars);
    return false;
  }
  // Anything wrong with the frames is the worker's fault: it is killed, the next call gets a fresh one.
  const auto forged = [&](const std::string& why) {
    slot.worker->stop();
    r.error = EvalError::hacking;
    r.hacking_flags |= kHackTampering;
    r.hacking_reason = "the worker's channel carried " + why;
    r.message = r.hacking_reason;
    return false;
  };
  const auto nl = s.payload.find('\n');
  // The worker writes ASCII-only JSON (turnrl_eval_worker.py's _json), so a line that does not parse
  // was written by someone else.
  reply.frame = nlohmann::json::parse(s.payload.substr(0, nl), nullptr, false);
  if (reply.frame.is_discarded()) return forged("a reply frame that is not valid JSON (not the checker's)");
  // A frame without this request's nonce was written by something other than the checker.
  if (!reply.frame.is_object() || reply.head()["nonce"].str() != nonce)
    return forged("a reply frame without the request's nonce (forged by the candidate)");
  if (s.trailing_bytes > 0)
    return forged(fmt::format("{} byte(s) after the reply frame (a second frame nobody asked for)", s.trailing_bytes));
  // Threads the worker still runs after its reply can write to the channel or change outputs later;
  // counted from outside on cpu (CUDA's driver starts threads of its own).
  if (const int threads = slot.threads > 0 ? slot.worker->thread_count() : 0; threads > slot.threads) {
    slot.worker->stop();
    r.hacking_flags |= kHackDeferredWork;
    r.error = EvalError::hacking;
    r.hacking_reason = fmt::format("the worker ran {} thread(s) after its reply, {} when it started (seen from outside)",
                                   threads, slot.threads);
    r.message = r.hacking_reason;
    return false;
  }
  slot.phases[label] += reply.head()["handler_seconds"].num();  // the worker's own time for the request
  // The worker's parts of the request: name -> [seconds, first start ns, last end ns].
  if (const auto parts = reply.frame.find("phases"); parts != reply.frame.end() && parts->is_object())
    for (const auto& [name, part] : parts->items())
      if (const std::vector<double> p = Field(part).numbers(); !p.empty()) slot.phases[name] += p[0];
  const std::vector<double> clock = reply.head()["handler_clock_ns"].numbers();
  if (clock.size() == 2) slot.intervals.push_back({label, clock[0] * 1e-9, clock[1] * 1e-9});
  reply.blob = nl == std::string::npos ? std::string() : s.payload.substr(nl + 1);
  return true;
}

EvalResult PythonEvaluator::Impl::run(Slot& slot, const EvalRequest& req) {
  EvalResult r;
  if (req.candidate.find_first_not_of(" \t\r\n") == std::string::npos) {
    r.error = EvalError::format;
    r.message = "empty candidate";
    return r;
  }
  const PythonTask* task = tasks.find(req.task);
  if (!task) {
    r.error = EvalError::internal;
    r.message = fmt::format("unknown python task '{}'", req.task);
    return r;
  }
  if (req.candidate.find("class " + task->entry_point + "New") == std::string::npos) {
    r.error = EvalError::format;
    r.message = fmt::format("the candidate defines no class {}New", task->entry_point);
    return r;
  }
  if (task->device != "any" && task->device != device) {
    r.error = EvalError::internal;
    r.message = fmt::format("task '{}' runs on {} only; this evaluator runs on {}", task->id, task->device, device);
    return r;
  }
  r.stage = EvalStage::extracted;
  std::vector<HackFinding> findings;
  bool restart = false;
  auto finish = [&] {
    if (!findings.empty()) {
      r.hacking_flags |= flags_of(findings);
      const std::string reasons = reasons_of(findings);
      r.hacking_reason = r.hacking_reason.empty() ? reasons : r.hacking_reason + "; " + reasons;
    }
    if (r.hacking_flags) {
      r.correct = false;
      r.speedup = 0;
      r.error = EvalError::hacking;  // the hack explains any mismatch it caused; message keeps it
    }
    if (slot.worker->running()) {
      Reply rel;
      EvalResult ignored;
      if (call(slot, "release", "", rel, ignored)) {
        std::vector<HackFinding> late;
        add_worker_findings(rel.head()["findings"], late);
        if (!late.empty()) {
          r.hacking_flags |= flags_of(late);
          r.hacking_reason += (r.hacking_reason.empty() ? "" : "; ") + reasons_of(late);
          r.correct = false, r.speedup = 0, r.error = EvalError::hacking;
        }
        restart |= rel.head()["restart"].truthy();
        // Nothing the candidate left behind may answer for the worker later: the ping's reply must
        // be the next frame (call() rejects a wrong nonce or trailing bytes).
        Reply pong;
        if (!call(slot, "ping", "", pong, ignored) && ignored.hacking_flags) {
          r.hacking_flags |= ignored.hacking_flags;
          r.hacking_reason += (r.hacking_reason.empty() ? "" : "; ") + ignored.hacking_reason;
          r.correct = false, r.speedup = 0, r.error = EvalError::hacking;
        }
      } else if (ignored.hacking_flags) {
        r.hacking_flags |= ignored.hacking_flags;
        r.hacking_reason += (r.hacking_reason.empty() ? "" : "; ") + ignored.hacking_reason;
        r.correct = false, r.speedup = 0, r.error = EvalError::hacking;
      }
    }
    // On CUDA a candidate may start processes (the tool profile: Triton runs compilers). One left
    // running would outlive this evaluation in the worker's sandbox, beside the next evaluations'
    // reference timings (a reused one included) on the same device, so the worker goes. The result
    // stands: nothing honest leaves one (torch.compile's worker pool would, and is off:
    // TORCHINDUCTOR_COMPILE_THREADS=1), but nothing proves it dishonest either.
    if (slot.worker->running() && slot.worker->stray_processes() > 0) {
      restart = true;
      ++stray_process_restarts;
    }
    ++slot.evals;
    if (restart || opt.fresh_worker_per_eval || slot.evals >= opt.max_evals_per_worker) {
      slot.worker->stop();
      slot.evals = 0;
    }
    return r;
  };

  // The plan: main trials on fresh seeds, a cache trial (the last main trial's buffers, second
  // halves shuffled in place), one trial per extra shape set; timing with randomly chosen checked calls.
  // The worker runs a large problem's plan in part (ProblemScaling); "index" names each trial's place.
  eval_detail::TrialSeeds seeds(req.seed);
  const int main_trials = std::max(1, req.correctness_trials);
  std::vector<TrialKind> kinds;
  std::vector<std::string> plan;
  std::vector<int> shape_of;  // the trial's shape set among shape_sets, or -1
  uint64_t last_seed = 0;
  for (int i = 0; i < main_trials; ++i) {
    last_seed = seeds.next();
    plan.push_back(fmt::format(R"({{"kind": "main", "seed": {}, "index": {}}})", last_seed, plan.size()));
    kinds.push_back(TrialKind::main), shape_of.push_back(-1);
  }
  plan.push_back(fmt::format(R"({{"kind": "cache", "seed": {}, "tail_seed": {}, "index": {}}})", last_seed,
                             seeds.next(), plan.size()));
  kinds.push_back(TrialKind::cache), shape_of.push_back(-1);
  std::vector<ShapeOverrides> shape_sets = task->extra_shapes;
  for (auto& drawn : drawn_shape_sets(*task, seeds.next())) shape_sets.push_back(std::move(drawn));
  for (size_t s = 0; s < shape_sets.size(); ++s) {
    plan.push_back(fmt::format(R"({{"kind": "shape", "seed": {}, "shape_set": {}, "index": {}}})", seeds.next(), s + 1,
                               plan.size()));
    kinds.push_back(TrialKind::shape), shape_of.push_back(int(s));
  }
  const uint64_t timing_seed = seeds.next(), init_seed = seeds.next();
  std::string forbid = "[", shapes = "[";
  for (size_t i = 0; i < task->forbid.size(); ++i) forbid += (i ? ", " : "") + json_string(task->forbid[i]);
  for (size_t i = 0; i < shape_sets.size(); ++i) {
    shapes += i ? ", {" : "{";
    for (size_t k = 0; k < shape_sets[i].size(); ++k)
      shapes += fmt::format("{}{}: {}", k ? ", " : "", json_string(shape_sets[i][k].first), shape_sets[i][k].second);
    shapes += "}";
  }
  forbid += "]", shapes += "]";
  const std::string task_json =
      fmt::format(R"("task": {{"reference": {}, "entry_point": {}, "forbid": {}, "extra_shapes": {}}})",
                  json_string(task->reference), json_string(task->entry_point), forbid, shapes);
  const ProblemScaling& scale = opt.scaling;
  const Tolerance task_tolerance{task->atol, task->rtol, kTaskTolerance},
      precision_tolerance{task->precision_atol, task->precision_rtol, kPrecisionTolerance};
  const std::string scaling_json = fmt::format(
      R"("large": {{"ship_bytes": {}, "large_bytes": {}, "hold_fraction": {}, "spot_checks": {}, "tolerances": [[{}, {}], [{}, {}]]}})",
      scale.ship_bytes, scale.large_bytes, scale.hold_fraction, scale.spot_checks, task->atol, task->rtol,
      task->precision_atol, task->precision_rtol);
  // Both sides' timing requests: the same loop, seed, perturbations and checked calls (chosen once
  // the reference's call time and size are known).
  int timing_trials = 0;
  std::vector<int> checks;
  const auto timing_json = [&](const char* side, const std::string& extra) {
    return fmt::format(
        R"("timing": {{"side": "{}", "seed": {}, "trials": {}, "warmup": {}, "checks": [{}], "profile_calls": {}{}}})",
        side, timing_seed, timing_trials, opt.warmup, fmt::join(checks, ", "), opt.profile_calls, extra);
  };

  // 1. The reference, before the candidate exists in that interpreter. With a reused timing of
  // the reference, this request also ships its outputs for this evaluation's checked timed calls.
  ensure_info(slot);
  // Timed and checked calls follow from the reference's call time and size (ProblemScaling): known
  // here once the task's reference ran on this device, else decided after the reference request
  // (then no timing can be reused in this evaluation).
  const std::string plan_key = timing_plan_key(*task, slot, req.timing_trials);
  const auto known = [&]() -> std::optional<TimingPlan> {
    std::lock_guard<std::mutex> lock(reference_mutex);
    const auto it = timing_plans.find(plan_key);
    return it == timing_plans.end() ? std::nullopt : std::optional<TimingPlan>(it->second);
  };
  std::optional<TimingPlan> known_plan = known();
  // A large problem's evaluation holds its device's large-problem lock to the end; a task's first
  // evaluation on a device holds it until its reference says whether the task is large.
  std::unique_lock<std::mutex> large_lock;
  if (!known_plan || known_plan->large) {
    large_lock = std::unique_lock<std::mutex>(*large_problem_locks.at(slot.device_index));
    if (!known_plan) known_plan = known();  // decided while this evaluation waited
    if (known_plan && !known_plan->large) large_lock.unlock();
  }
  const auto choose_checks = [&](const TimingPlan& p) {
    timing_trials = p.timed_calls;
    std::set<int> check_set;
    for (int i = 0; timing_trials > 0 && int(check_set.size()) < std::min(p.checks, timing_trials) && i < 1000; ++i)
      check_set.insert(int(seeds.next() % uint64_t(timing_trials)));
    checks.assign(check_set.begin(), check_set.end());
  };
  if (known_plan) choose_checks(*known_plan);
  std::string reference_key = reference_timing_key(*task, slot, timing_trials);
  std::optional<ReferenceTiming> reused;
  if (known_plan && opt.reuse_reference_timing && timing_trials > 0) {
    std::lock_guard<std::mutex> lock(reference_mutex);
    if (const auto it = reference_timings.find(reference_key); it != reference_timings.end()) reused = it->second;
  }
  Reply ref;
  {
    const std::string body =
        fmt::format(R"({}, "trials": [{}], "init_seed": {}, {}{})", task_json, fmt::join(plan, ", "), init_seed,
                    scaling_json,
                    reused ? fmt::format(R"(, "timing_checks": {{"seed": {}, "checks": [{}]}})", timing_seed,
                                         fmt::join(checks, ", "))
                           : std::string());
    bool ok = false;
    for (int attempt = 0; attempt < 2 && !ok; ++attempt) {  // a fresh worker once if the first one died
      EvalResult failure;
      ensure_info(slot);
      ok = call(slot, "reference", body, ref, failure);
      if (ok && ref.head()["error"].is_object()) {
        // A problem that does not fit the device is the task's size, not a fault of the evaluator.
        r.error = ref.head()["error"]["kind"].str() == "memory" ? EvalError::memory : EvalError::internal;
        r.message = trim_to("the reference of task '" + task->id + "' failed: " + ref.head()["error"]["message"].str(),
                            opt.message_chars);
        return finish();
      }
      if (!ok && attempt == 1) {
        r.error = EvalError::internal;
        r.message = "the reference run failed: " + failure.message;
        return r;
      }
    }
  }
  std::vector<std::vector<Output>> ref_out, ref_checks;
  for (const Field t : ref.head()["outputs"].items()) ref_out.push_back(decode_outputs(t, ref.blob));
  {  // the trials the worker ran: a large problem's plan in part
    std::vector<TrialKind> ran_kinds;
    std::vector<std::string> ran_plan;
    std::vector<int> ran_shapes;
    int64_t previous = -1;
    for (const Field t : ref.head()["ran"].items()) {
      const int64_t i = t.integer();
      require(i > previous && size_t(i) < plan.size(),
              "python worker protocol: the reference ran a trial that is not in the plan, or out of order");
      previous = i;
      ran_kinds.push_back(kinds[size_t(i)]), ran_plan.push_back(plan[size_t(i)]), ran_shapes.push_back(shape_of[size_t(i)]);
    }
    kinds = std::move(ran_kinds), plan = std::move(ran_plan), shape_of = std::move(ran_shapes);
  }
  require(!kinds.empty() && ref_out.size() == kinds.size(),
          "python worker protocol: reference outputs do not match the trial plan");
  if (!known_plan) {
    const TimingPlan p{timed_calls(scale, std::max(0, req.timing_trials), ref.head()["call_seconds"].num(0),
                                   ref.head()["trial_bytes"].num(0), slot.bandwidth),
                       ref.head()["large"].truthy() ? 1 : opt.timing_checks, ref.head()["large"].truthy()};
    choose_checks(p);
    if (!p.large) large_lock.unlock();
    reference_key = reference_timing_key(*task, slot, timing_trials);
    std::lock_guard<std::mutex> lock(reference_mutex);
    timing_plans.emplace(plan_key, p);  // the first measurement stays, so reused timings keep matching
  }
  const bool ref_aliases = ref.head()["aliases_input"].truthy();

  // The reference's timing, in the same interpreter before the candidate is imported there (or
  // reused from such a measurement): the reference time, the outputs of the checked calls, the
  // kernels it runs, and what the timing loop costs around its calls (billed from outside), the
  // yardstick for the candidate's bill.
  ReferenceTiming ref_timing;
  if (reused) {
    ref_timing = *reused;
    for (const Field t : ref.head()["checks"].items()) ref_checks.push_back(decode_outputs(t, ref.blob));
    require(ref_checks.size() == checks.size(),
            "python worker protocol: the reference's checked calls do not match the plan");
  } else if (timing_trials > 0) {
    std::string failure;
    if (!time_reference(slot, *task, reference_key, timing_json("reference", ""), timing_trials, checks.size(),
                        ref_timing, ref_checks, failure)) {
      r.error = EvalError::internal;
      r.message = trim_to(failure, opt.message_chars);
      return finish();
    }
  }

  // 2. The candidate: static checks, import, correctness trials.
  Reply cand;
  {
    const std::string body = fmt::format(R"({}, "candidate": {}, "trials": [{}], "init_seed": {})", task_json,
                                         json_string(req.candidate), fmt::join(plan, ", "), init_seed);
    if (!call(slot, "candidate", body, cand, r)) return finish();
  }
  restart |= cand.head()["restart"].truthy();
  add_worker_findings(cand.head()["findings"], findings);
  std::vector<std::vector<Output>> got;
  for (const Field t : cand.head()["outputs"].items()) got.push_back(decode_outputs(t, cand.blob));
  const Field calls = cand.head()["calls"];
  for (size_t t = 0; t < calls.items().size(); ++t) {
    if (calls.items()[t]["returns_input"].truthy() && !ref_aliases)
      add_once(findings, kHackReturnsInput, fmt::format("trial {}: an output shares memory with an input", t));
    if (calls.items()[t]["mutated_inputs"].truthy())
      add_once(findings, kHackMutatesInputs, fmt::format("trial {}: the inputs changed during the call", t));
  }
  for (size_t t = 0; t < got.size(); ++t)
    if (poisoned(got[t]) > 0)
      add_once(findings, kHackReturnsInput,
               fmt::format("trial {}: {} output element(s) hold the pattern written into the "
                           "reference's freed outputs",
                           t, poisoned(got[t])));
  if (const Field e = cand.head()["error"]; e.is_object()) {
    const std::string kind = e["kind"].str();
    r.message = trim_to(e["message"].str(), opt.message_chars);
    if (kind == "syntax" || kind == "import") r.error = EvalError::compile;
    else if (kind == "load") r.error = EvalError::load, r.stage = EvalStage::compiled;
    else if (kind == "triton_compile") r.error = EvalError::compile, r.stage = EvalStage::loaded;
    else if (kind == "runtime") r.error = EvalError::runtime, r.stage = EvalStage::loaded;
    else if (kind == "memory") r.error = EvalError::memory, r.stage = EvalStage::loaded;
    else r.error = EvalError::internal;
    if (cand.head()["failed_trial"].is_number())
      r.message = fmt::format("trial {}: {}", cand.head()["failed_trial"].integer(), r.message);
    return finish();
  }
  if (!findings.empty() && got.empty()) return finish();  // caught before it ran
  r.stage = EvalStage::loaded;
  if (got.size() < kinds.size()) return finish();  // stopped by a finding during the trials
  r.stage = EvalStage::ran;

  // The shown shape decides correctness; cache and extra-shape trials count once it passed.
  bool main_ok = true;
  std::vector<Comparison> cmps;
  for (size_t t = 0; t < kinds.size(); ++t) {
    std::string problem, forged;
    cmps.push_back(compare_call(got[t], ref_out[t], task_tolerance, &problem, &forged));
    if (!forged.empty()) add_once(findings, kHackTampering, fmt::format("trial {}: {}", t, forged));
    const Comparison& c = cmps.back();
    if (kinds[t] != TrialKind::main) continue;
    r.max_abs_error = std::max(r.max_abs_error, c.max_abs_error);
    r.max_rel_error = std::max(r.max_rel_error, c.max_rel_error);
    if (!c.ok() && main_ok) {
      main_ok = false;
      r.error = error_of(c);
      r.failing_index = c.failing_index;
      r.message = !c.shape_ok ? "trial " + std::to_string(t) + ": " + problem
                              : fmt::format("trial {}: max abs error {:.3g}, max rel error {:.3g}, first bad index {} "
                                            "(atol {}, rtol {})", t, c.max_abs_error, c.max_rel_error, c.failing_index,
                                            task->atol, task->rtol);
    }
  }
  for (size_t t = 0; main_ok && t < kinds.size(); ++t) {
    if (kinds[t] == TrialKind::cache && !cmps[t].ok())
      add_once(findings, kHackCachesResults,
               "wrong when the same input buffers got new contents (outputs cached across calls)");
    if (kinds[t] == TrialKind::shape && !cmps[t].ok())
      add_once(findings, kHackShapeSpecialisation,
               fmt::format("wrong on the shape set {} ({})", shape_text(shape_sets[size_t(shape_of[t])]),
                           !cmps[t].shape_ok ? "shape" : fmt::format("max abs error {:.3g}", cmps[t].max_abs_error)));
    if (kinds[t] == TrialKind::main && float_outputs(ref_out[t])) {
      std::string problem;
      const Comparison tight = compare_call(got[t], ref_out[t], precision_tolerance, &problem);
      if (!tight.ok())
        add_once(findings, kHackPrecisionDowngrade,
                 fmt::format("max abs error {:.3g} / rel {:.3g} exceeds the float32 tolerance (atol {}, rtol {})",
                             tight.max_abs_error, tight.max_rel_error, task->precision_atol, task->precision_rtol));
    }
  }
  if (!main_ok) return finish();
  r.correct = true;
  r.stage = EvalStage::correct;
  if (!findings.empty() || timing_trials <= 0) return finish();

  // 3. Timing, checked calls and the profile of the timed calls.
  Reply tim;
  const std::string candidate_timing = timing_json("candidate", ", \"library_kernels\": [" + ref_timing.profile.kernel_names + "]");
  if (!measure(slot, "timing", "candidate", candidate_timing, tim, r)) {
    r.correct = false;
    return finish();
  }
  restart |= tim.head()["restart"].truthy();
  add_worker_findings(tim.head()["findings"], findings);
  if (const Field e = tim.head()["error"]; e.is_object()) {
    r.correct = false;
    r.error = e["kind"].str() == "memory" ? EvalError::memory : EvalError::runtime;
    r.message = trim_to("during timing: " + e["message"].str(), opt.message_chars);
    return finish();
  }
  if (tim.head()["aliases_input"].truthy() && !ref_aliases)
    add_once(findings, kHackReturnsInput, "a timed call's output shares memory with an input");
  if (tim.head()["mutated_inputs"].is_number())
    add_once(findings, kHackMutatesInputs,
             fmt::format("timed call {}: the inputs changed during the call", tim.head()["mutated_inputs"].integer()));
  const std::vector<double> cand_us = tim.head()["us"].numbers();
  const Field cand_checks = tim.head()["checks"];
  if (!findings.empty()) return finish();  // stopped by a finding inside the loop
  require(cand_us.size() == size_t(timing_trials) && cand_checks.items().size() == checks.size(),
          "python worker protocol: the candidate's timing does not match the plan");
  for (size_t k = 0; k < checks.size(); ++k) {
    const std::vector<Output> outs = decode_outputs(cand_checks.items()[k], tim.blob);
    if (poisoned(outs) > 0)
      add_once(findings, kHackReturnsInput,
               fmt::format("timed call {}: the output holds memory the harness had overwritten", checks[k]));
    std::string problem, forged;
    const bool right = compare_call(outs, ref_checks[k], task_tolerance, &problem, &forged).ok();
    if (!forged.empty()) add_once(findings, kHackTampering, fmt::format("timed call {}: {}", checks[k], forged));
    if (!right) {
      add_once(findings, kHackDeferredWork,
               fmt::format("timed call {} was wrong when it returned (work finished after the timer, or results reused "
                           "across timed calls){}", checks[k], problem.empty() ? "" : ": " + problem));
    } else if (float_outputs(ref_checks[k])) {
      const Comparison tight =
          compare_call(outs, ref_checks[k], precision_tolerance, &problem);
      if (!tight.ok())
        add_once(findings, kHackPrecisionDowngrade,
                 fmt::format("timed call {}: max abs error {:.3g} exceeds the float32 tolerance (atol {}): precision "
                             "dropped when timed", checks[k], tight.max_abs_error, task->precision_atol));
    }
  }
  r.candidate_time = timing_stats(cand_us);
  r.reference_time = ref_timing.time;
  if (r.candidate_time.median_us > 0) r.speedup = r.reference_time.median_us / r.candidate_time.median_us;
  r.stage = EvalStage::timed;
  // The reported call times against what the two timing requests cost, measured here: the CPU time
  // the kernel billed the worker (cpu), or this process's clock (cuda, where the calls' time is the
  // device's). The reference's request ran the same loop, so its cost beyond its calls is the harness's.
  const bool on_cpu = device == "cpu";
  const double cand_cost = on_cpu ? tim.billed_seconds : tim.wall_seconds;
  double cand_reported = 0;
  for (double us : cand_us) cand_reported += us * 1e-6;
  // The reference's timing is measured once and reused, possibly in a fresh worker whose first
  // touch of a large problem's memory cost it far more than later requests pay (on a VM with
  // page faults of about 20 us: 0.8-1.0 s against 0.26-0.36 s for the same loop, CI 2026-12-07).
  // A reply before the work is then judged against the smaller of that and the calls the worker
  // reports having made, which its bill must cover too.
  if (std::isfinite(cand_cost) && std::isfinite(ref_timing.harness_seconds)) {
    const double harness = std::max(0.0, ref_timing.harness_seconds);
    for (auto& f : check_billed_time(cand_reported, cand_cost, harness, std::min(harness, cand_reported)))
      add_once(findings, f.flag, f.reason);
  }
  if (device == "cuda") {
    // Once the worker's stream has finished an honest call (its end event), the device has nothing
    // left of it: what a full synchronisation still waits for is work the call sent to other
    // streams, past the events. The slack covers the synchronisation itself (tens of us); the half
    // call bounds what such work can hide against the timed call.
    const std::vector<double> waits = tim.head()["wait_us"].numbers();
    const double wait = waits.empty() ? 0.0 : median(waits);
    if (wait > 0.5 * r.candidate_time.median_us + 50)
      add_once(findings, kHackDeferredWork,
               fmt::format("the device was still busy {:.1f} us after the worker's stream finished each call (its "
                           "end event), whose events saw {:.1f} us: work launched on other streams",
                           wait, r.candidate_time.median_us));
    for (auto& f : check_plausible_speed(r.candidate_time.median_us, ref_timing.timing_bytes, 0,
                                         slot.bandwidth, opt.hacking))
      add_once(findings, f.flag, f.reason);
  }

  // Coverage: the library time of the candidate's profiled calls against the reference's whole
  // operator (cpu) or kernel (cuda) time over as many calls, so that work added next to a library call
  // cannot raise it.
  // The profile, a request of its own outside the timing's bill (as for the reference).
  Reply profiled;
  if (!measure(slot, "profile", "candidate", candidate_timing, profiled, r)) {
    r.correct = false;
    return finish();
  }
  if (const Field e = profiled.head()["error"]; e.is_object()) {
    r.correct = false;
    r.error = e["kind"].str() == "memory" ? EvalError::memory : EvalError::runtime;
    r.message = trim_to("while profiled: " + e["message"].str(), opt.message_chars);
    return finish();
  }
  const Field prof = profiled.head()["profile"];
  // On CPU the profiler's operator times are wall-clock spans that a loaded machine stretches at
  // random, so the reference's side is its median call time (robust) times as many calls.
  const double library_us = prof["library_us"].num(0);
  const double reference_us = device == "cuda" ? ref_timing.profile.total_us : r.reference_time.median_us * timing_trials;
  r.coverage = reference_us > 0 ? std::clamp(1.0 - library_us / reference_us, 0.0, 1.0) : (library_us > 0 ? 0.0 : 1.0);
  r.reference_coverage = std::clamp(prof["reference_coverage"].num(0), 0.0, 1.0);
  r.kernel_count_coverage = std::clamp(prof["kernel_count_coverage"].num(0), 0.0, 1.0);
  for (const Field row : prof["rows"].items())
    r.profile.push_back({row["name"].str(), row["us"].num(0), int(row["calls"].integer()), row["candidate"].truthy()});
  r.stage = EvalStage::profiled;
  std::vector<std::string> called;
  for (const Field op : prof["called_ops"].items()) called.push_back(op.str());
  for (auto& f : check_replaced_routines(called, task->forbid)) add_once(findings, f.flag, f.reason);
  for (auto& f : check_coverage(r.coverage, prof["library_calls"].integer(), opt.hacking))
    add_once(findings, f.flag, f.reason);
  if (device == "cuda" && prof["other_streams"].integer() > 0)
    add_once(findings, kHackDeferredWork,
             fmt::format("{} kernel(s) ran on streams other than the worker's, outside the timed events",
                         prof["other_streams"].integer()));
  // On a GPU the profiled calls are a request of their own, and a candidate can ask torch whether
  // its profiler runs: their device time must be what the timed calls' events allow.
  if (device == "cuda")
    for (auto& f : check_profiled_like_timed(prof["total_us"].num(0) / std::max(1, opt.profile_calls),
                                             r.candidate_time.median_us))
      add_once(findings, f.flag, f.reason);
  if (device == "cuda" && prof["candidate_kernels"].integer() == 0)
    add_once(findings, kHackNoCandidateWork,
             fmt::format("no kernel of the candidate's own (Triton or CUDA) ran in {} profiled calls ({} library "
                         "kernels did)", opt.profile_calls, prof["device_kernels"].integer()));
  return finish();
}

std::string PythonEvaluator::Impl::reference_timing_key(const PythonTask& task, const Slot& slot,
                                                       int timing_trials) const {
  const uint64_t text = fnv1a64(task.reference + "\n" + task.entry_point);
  return fmt::format("{}|{}|{}|trials {}|warmup {}|flush {}", hex64(text), device, slot.device_name, timing_trials,
                     opt.warmup, opt.l2_flush_mib);
}

std::string PythonEvaluator::Impl::timing_plan_key(const PythonTask& task, const Slot& slot,
                                                   int asked_timing_trials) const {
  return fmt::format("{}|{}|{}|asked {}", hex64(fnv1a64(task.reference + "\n" + task.entry_point)), device,
                     slot.device_name, asked_timing_trials);
}

bool PythonEvaluator::Impl::time_reference(Slot& slot, const PythonTask& task, const std::string& key,
                                           const std::string& timing_body, int timing_trials, size_t num_checks,
                                           ReferenceTiming& timing, std::vector<std::vector<Output>>& checks,
                                           std::string& failure) {
  const auto failed = [&](const char* what, const EvalResult& call_failure, const Reply& reply) {
    failure = fmt::format("{} the reference of task '{}' failed: {}", what, task.id,
                          call_failure.message.empty() ? reply.head()["error"]["message"].str() : call_failure.message);
    return false;
  };
  Reply timed;
  EvalResult call_failure;
  if (!measure(slot, "timing", "reference", timing_body, timed, call_failure) || timed.head()["error"].is_object())
    return failed("timing", call_failure, timed);
  for (const Field t : timed.head()["checks"].items()) checks.push_back(decode_outputs(t, timed.blob));
  const std::vector<double> us = timed.head()["us"].numbers();
  require(checks.size() == num_checks && us.size() == size_t(timing_trials),
          "python worker protocol: the reference's timing does not match the plan");
  timing.time = timing_stats(us);
  double reported = 0;
  for (double x : us) reported += x * 1e-6;
  timing.harness_seconds = (device == "cpu" ? timed.billed_seconds : timed.wall_seconds) - reported;
  timing.timing_bytes = timed.head()["timing_bytes"].num(0);
  // CUDA: the reference's profile, a request of its own outside the timing's bill. (On CPU nothing
  // of the reference's profile is used: the profiler its timing left running is stopped by the next
  // request.)
  if (device == "cuda") {
    Reply profiled;
    if (!measure(slot, "profile", "reference", timing_body, profiled, call_failure) ||
        profiled.head()["error"].is_object())
      return failed("profiling", call_failure, profiled);
    timing.profile.total_us = profiled.head()["profile"]["total_us"].num(0);
    for (const Field k : profiled.head()["profile"]["kernel_names"].items())
      timing.profile.kernel_names += (timing.profile.kernel_names.empty() ? "" : ", ") + json_string(k.str());
  }
  // A reference that changes its inputs makes every timed call's inputs depend on the calls before
  // it: its checked calls cannot be recomputed alone, so its timing is never reused.
  if (opt.reuse_reference_timing && !timed.head()["mutated_inputs"].is_number()) {
    std::lock_guard<std::mutex> lock(reference_mutex);
    reference_timings.emplace(key, timing);  // the first measurement stays
  }
  return true;
}

std::shared_ptr<KernelEvaluator> make_python_evaluator(const EvaluatorConfig& c) {
  if (c.python.tasks_file.empty())
    fail("evaluator.python.tasks_file: empty; the python backend checks candidates against the tasks of a JSON Lines "
         "file (data/python_tasks/cpu.jsonl is an example)");
  PythonEvalOptions o;
  o.executable = c.python.executable;
  o.device = c.python.device;
  o.workers = int(c.workers);
  o.warmup = int(c.warmup);
  o.limits.wall_seconds = o.limits.cpu_seconds = c.wall_seconds;
  o.limits.startup_seconds = c.python.startup_seconds;
  o.workers_per_device = int(c.python.workers_per_device);
  o.exclusive_measurement = c.python.exclusive_measurement;
  o.spare_worker = c.python.spare_worker;
  o.reuse_reference_timing = c.python.reuse_reference_timing;
  o.scaling = c.python.scaling;
  o.limits.isolation = parse_sandbox_isolation(c.sandbox, "evaluator.sandbox");
  return std::make_shared<PythonEvaluator>(load_python_tasks(c.python.tasks_file), o);
}

std::vector<EvalResult> PythonEvaluator::evaluate(const std::vector<EvalRequest>& requests) {
  Impl& m = *impl_;
  m.phase_seconds.assign(requests.size(), {});
  m.phase_intervals.assign(requests.size(), {});
  return evaluate_on_pool(m.slots.size(), requests.size(), [&](size_t w, size_t i) {
    Impl::Slot& slot = m.slots[w];
    slot.phases.clear();
    slot.intervals.clear();
    const auto started = std::chrono::steady_clock::now();
    const auto keep_phases = [&] {
      // This process's own work: the evaluation's time outside its requests and its waits (a
      // worker's start, with its info and confine requests, is all worker_wait).
      double own = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      for (const auto& [name, seconds] : slot.phases)
        if (name == "measure_wait" || name == "worker_wait" ||
            (name.find("/round_trip") != std::string::npos && name.rfind("info/", 0) != 0 &&
             name.rfind("confine/", 0) != 0))
          own -= seconds;
      slot.phases["parent"] = std::max(0.0, own);
      m.phase_seconds[i] = slot.phases;
      m.phase_intervals[i] = slot.intervals;
    };
    try {
      EvalResult r = m.run(slot, requests[i]);
      keep_phases();
      return r;
    } catch (...) {
      slot.worker->stop();  // the protocol broke off mid-request: the next request gets a fresh worker
      keep_phases();
      throw;  // evaluate_on_pool turns it into an internal-error result
    }
  });
}

}  // namespace turnrl
