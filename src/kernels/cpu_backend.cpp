#include "turnrl/kernels/cpu_backend.h"

#include <unistd.h>


#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/ranges.h>

#include "library_samples.h"
#include "trial_seeds.h"
#include "object_cache.h"
#include "worker_round_trip.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/core/hash.h"
#include "turnrl/core/error.h"
#include "turnrl/core/install_paths.h"
#include "turnrl/kernels/cpu_protocol.h"
#include "turnrl/kernels/cpu_tasks.h"

namespace turnrl {
namespace fs = std::filesystem;
using cpu_detail::CallReport;
using cpu_detail::RequestKind;
using cpu_detail::TrialPlan;
using cpu_detail::WorkerReply;
using cpu_detail::WorkerRequest;
using cpu_detail::WorkerStatus;

namespace {

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  fail("cpu evaluator: compiler '{}' not found on PATH", name);
}

// The directory holding turnrl/kernels/candidate_api.h for candidates' #include.
std::string api_include_dir() {
  const std::string header = "turnrl/kernels/candidate_api.h";
  const std::string path = find_turnrl_file(TurnrlFiles::headers, header);
  return path.substr(0, path.size() - header.size() - 1);
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("TURNRL_EVAL_CACHE")) return d;
  const char* tmp = std::getenv("TMPDIR");
  return fmt::format("{}/turnrl-cpu-cache-{}", tmp && *tmp ? tmp : "/tmp", getuid());
}

struct TrialKind {
  enum Kind { main, cache, extra_shape, precision } kind;
};

// The reference outputs of one trial, computed in the parent (never inside the worker).
std::vector<at::Tensor> reference_outputs(const CpuTask& task, const TrialPlan& plan, uint64_t reuse_seed) {
  std::vector<at::Tensor> in = make_inputs(task, plan.input_shapes, plan.reuse ? reuse_seed : plan.seed);
  if (plan.reuse) rewrite_tail(task, in, plan.tail_seed);
  std::vector<at::Tensor> out;
  for (auto& t : task.reference(in)) out.push_back(t.contiguous().to(at::kFloat));
  return out;
}

std::vector<std::vector<int64_t>> shapes_of(const std::vector<at::Tensor>& ts) {
  std::vector<std::vector<int64_t>> s;
  for (const auto& t : ts) s.emplace_back(t.sizes().begin(), t.sizes().end());
  return s;
}

// One finding per flag: the first trial that showed it.
void add_call_findings(const CallReport& r, const std::string& where, std::vector<HackFinding>& f) {
  if (r.aliases_input) add_once(f, kHackReturnsInput, where + ": an output points into an input buffer");
  if (r.repointed) add_once(f, kHackReturnsInput, where + ": an output descriptor was replaced by other memory");
  if (r.mutated_inputs) add_once(f, kHackMutatesInputs, where + ": the inputs changed during the call");
  if (r.out_of_bounds) add_once(f, kHackOutOfBoundsWrite, where + ": a guard region around an output was written");
  if (r.rewrote_got)
    add_once(f, kHackTampering, where + ": a loaded library's GOT slot was rewritten (code the harness calls)");
  if (r.called_replaced)
    add_once(f, kHackCallsReference, where + ": called the library routine the task asks to replace (refused)");
  if (r.left_threads || r.changed_after_return)
    add_once(f, kHackDeferredWork, where + (r.changed_after_return ? ": outputs kept changing after the call returned"
                                                                    : ": threads were left running after the call"));
}

// with_outputs: the call's outputs come back (correctness trials, the candidate's timed calls);
// otherwise none may (warm-up calls, the reference's timed calls).
std::string malformed_call(const CallReport& c, const std::vector<std::vector<int64_t>>& output_shapes, bool with_outputs,
                           const std::string& where) {
  if (c.outputs.size() != (with_outputs ? output_shapes.size() : 0))
    return fmt::format("{}: {} outputs for {}", where, c.outputs.size(), with_outputs ? output_shapes.size() : 0);
  for (size_t k = 0; k < c.outputs.size(); ++k)
    if (int64_t(c.outputs[k].size()) != numel(output_shapes[k]))
      return fmt::format("{}: output {} has {} elements, not {}", where, k, c.outputs[k].size(), numel(output_shapes[k]));
  for (double t : {c.call_us, c.call_cpu_us, c.lib_us, c.lib_cpu_us})
    if (!std::isfinite(t) || t < 0) return fmt::format("{}: time {}", where, t);
  return "";
}

// Why a decoded reply cannot be the worker's answer to req ("" when it can): the nonce, the number
// of calls and outputs, and every time must be what the request implies.
std::string malformed_reply(const WorkerRequest& req, const WorkerReply& reply) {
  if (reply.nonce != req.nonce) return "the reply answers another request (nonce)";
  const bool ok = reply.status == WorkerStatus::ok;
  if (req.kind == RequestKind::ping)
    return ok && reply.trials.empty() && reply.timed.empty() && reply.warmups.empty() ? "" : "a ping got a full reply";
  if (req.kind == RequestKind::correctness) {
    if (!reply.timed.empty() || !reply.warmups.empty()) return "timed calls in a correctness reply";
    if (reply.trials.size() > req.trials.size() || (ok && reply.trials.size() != req.trials.size()))
      return fmt::format("{} trials for {} requested", reply.trials.size(), req.trials.size());
    if (reply.status == WorkerStatus::runtime_error && reply.failed_trial >= 0 &&
        size_t(reply.failed_trial) + 1 != reply.trials.size())
      return fmt::format("failed trial {} of {} reported", reply.failed_trial, reply.trials.size());
    for (size_t t = 0; t < reply.trials.size(); ++t)
      if (auto why = malformed_call(reply.trials[t], req.trials[t].output_shapes, true, fmt::format("trial {}", t));
          !why.empty())
        return why;
    return "";
  }
  if (!reply.trials.empty()) return "correctness trials in a timing reply";
  if (reply.warmups.size() > size_t(std::max(0, req.warmup)) || reply.timed.size() > size_t(std::max(0, req.timing_trials)) ||
      (ok && (reply.warmups.size() != size_t(req.warmup) || reply.timed.size() != size_t(req.timing_trials))))
    return fmt::format("{} warm-up and {} timed calls for {} and {} requested", reply.warmups.size(), reply.timed.size(),
                       req.warmup, req.timing_trials);
  for (size_t w = 0; w < reply.warmups.size(); ++w)
    if (auto why = malformed_call(reply.warmups[w], req.timing_output_shapes, false, fmt::format("warm-up {}", w));
        !why.empty())
      return why;
  for (size_t i = 0; i < reply.timed.size(); ++i)
    if (auto why = malformed_call(reply.timed[i], req.timing_output_shapes, !req.library.empty(),
                                  fmt::format("timed call {}", i));
        !why.empty())
      return why;
  if (reply.lib_names.size() != reply.lib_stats.size()) return "library profile names and entries differ in number";
  const size_t mirrored = req.library.empty() ? size_t(total_numel(req.timing_output_shapes)) * reply.timed.size() : 0;
  if (reply.mirrored_outputs.size() != mirrored)
    return fmt::format("{} mirrored output values for {}", reply.mirrored_outputs.size(), mirrored);
  for (size_t k = 0; k < reply.lib_names.size(); ++k) {
    if (std::find(std::begin(cpu_detail::kLibraryRoutines), std::end(cpu_detail::kLibraryRoutines), reply.lib_names[k]) ==
        std::end(cpu_detail::kLibraryRoutines))
      return "unknown library routine '" + reply.lib_names[k] + "'";
    if (!std::isfinite(reply.lib_stats[k].us) || reply.lib_stats[k].us < 0 || reply.lib_stats[k].calls < 0)
      return "library profile entry out of range";
  }
  return "";
}

double sum_call_us(const std::vector<CallReport>& calls, double CallReport::*field) {
  double s = 0;
  for (const auto& c : calls) s += c.*field;
  return s;
}

EvalError error_of(const Comparison& c) {
  if (!c.shape_ok) return EvalError::shape;
  if (!c.finite) return EvalError::nonfinite;
  return EvalError::mismatch;
}

}  // namespace


namespace {

std::vector<double> timed_us(const std::vector<CallReport>& calls, const std::vector<char>& left_out = {}) {
  std::vector<double> us;
  for (size_t i = 0; i < calls.size(); ++i)
    if (i >= left_out.size() || !left_out[i]) us.push_back(calls[i].call_us);
  return us;
}

// Densely sampled calls (CpuEvalOptions::dense_sample_period_us) besides `timed` timed ones: one
// per 8, at least 2, at most 8.
int dense_call_count(int timed) { return std::clamp((timed + 7) / 8, 2, 8); }

// What a candidate worker's timing request holds on its heap at its peak: the inputs and the copy
// they are perturbed from, every timed call's kept outputs (densely sampled ones included), and
// the reply that carries them (encoded, with its buffer's last doubling), with 16 MiB to spare.
uint64_t timing_peak_heap_bytes(const ShapeSet& inputs, const std::vector<std::vector<int64_t>>& outputs,
                                int timing_trials) {
  if (timing_trials <= 0) return 0;
  const uint64_t input_bytes = uint64_t(total_numel(inputs)) * sizeof(float);
  const uint64_t output_bytes = uint64_t(total_numel(outputs)) * sizeof(float);
  const uint64_t kept = uint64_t(timing_trials + dense_call_count(timing_trials)) * output_bytes;
  return 2 * input_bytes + 4 * kept + (uint64_t(16) << 20);
}

// `count` of the places 0..total-1, in order, drawn with a fresh seed: nothing the candidate can
// see or predict (the densely sampled calls, the timed calls checked below).
std::vector<int> unpredictable_places(int total, int count) {
  std::vector<int> order(size_t(std::max(0, total)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(eval_detail::fresh_nonce()));
  order.resize(size_t(std::clamp(count, 0, total)));
  std::sort(order.begin(), order.end());
  return order;
}

// Timed calls the parent checks, drawn here after the reply arrived: the worker recorded every
// call's outputs the same way, so no call could tell it would be checked.
constexpr int kCheckedTimedCalls = 3;

void check_timed_outputs(const CpuTask& task, const WorkerRequest& treq, const WorkerReply& timing,
                         std::vector<HackFinding>& findings) {
  // The same inputs as the worker's timed call i.
  const std::vector<at::Tensor> base = make_inputs(task, 0, treq.timing_seed);
  std::vector<at::Tensor> inputs;  // every element written by perturb_for_timing
  for (const auto& t : base) inputs.push_back(at::empty_like(t));
  for (const int i : unpredictable_places(int(timing.timed.size()), kCheckedTimedCalls)) {
    perturb_for_timing(base, inputs, treq.timing_seed, i);
    std::vector<at::Tensor> ref;
    for (auto& t : task.reference(inputs)) ref.push_back(t.contiguous().to(at::kFloat));
    const auto& got = timing.timed[size_t(i)].outputs;
    const Comparison loose = compare_all(got, ref, task.atol, task.rtol);
    if (!loose.ok()) {
      add_once(findings, kHackDeferredWork,
               fmt::format("timed call {} returned wrong outputs (max abs error {:.3g}): the work differs when timed",
                           i, loose.max_abs_error));
      continue;
    }
    const Comparison tight = compare_all(got, ref, task.precision_atol, task.precision_rtol);
    if (!tight.ok())
      add_once(findings, kHackPrecisionDowngrade,
               fmt::format("timed call {}: max abs error {:.3g} exceeds the float32 tolerance (precision dropped when "
                           "timed)", i, tight.max_abs_error));
  }
}

// The timed calls' reported times against the worker's CPU clock read from outside at each call's
// two marks. Between the marks and the call lie only the marks' own hand-off (a wake-up and a system
// call's return, two clock reads, a send), so an honest wall time is at least the CPU time the marks
// enclose less that; a candidate that rewrote the clock the harness reads, or the times it stored,
// reports less (8.6x less through a rewritten GOT entry of steady_clock::now; 12.7x from an honest
// 1.1x kernel that moved the harness's saved start time on the stack in two calls of three).
// The hand-off is a few microseconds on an idle machine and has a long tail under load: the worker
// wakes with cold caches, and with its code sampled the kernel restarts the sampling timer at each
// wake-up. Three concurrent evaluations on a 2-core machine measured 13 us a call at the median
// unsampled, 28 us sampled, 80 us at the 99th percentile and 105 us at most; under CI's load an
// honest relu plan's three calls once averaged 117 us, which a bound on the sum (70 % of the marked
// time less 60 us a call) flagged. So the bound that flags is loose and robust: a call is short
// when it reports less than half its marked time less 150 us, and tampering is found when most
// calls are short, which is what moves the score (a median). What a looser bound lets through
// gains nothing: every call counts at least its marked CPU time less the hand-off
// (hold_to_marked_cpu).
// The CPU time (us) timed call i's two marks enclose, read from outside.
double marked_call_us(const std::vector<double>& marks, size_t i) { return 1e6 * (marks[2 * i + 1] - marks[2 * i]); }

std::vector<HackFinding> check_marked_calls(const WorkerReply& timing, const std::vector<double>& marks) {
  constexpr double kCallShare = 0.5, kCallSlackUs = 150.0;
  const size_t calls = timing.timed.size();
  if (marks.size() != 2 * calls)
    return {{kHackTampering, fmt::format("the worker marked {} call edges for {} timed calls", marks.size(), calls)}};
  std::vector<size_t> short_calls;
  for (size_t i = 0; i < calls; ++i)
    if (timing.timed[i].call_us < kCallShare * marked_call_us(marks, i) - kCallSlackUs) short_calls.push_back(i);
  if (2 * short_calls.size() <= calls) return {};
  const size_t i = short_calls.front();
  return {{kHackTampering,
           fmt::format("{} of {} timed calls reported less than half the worker's CPU time, read from outside at each "
                       "call's start and end (timed call {} reported {:.1f} us, its CPU clock advanced {:.1f} us): "
                       "the reported times were rewritten",
                       short_calls.size(), calls, i, timing.timed[i].call_us, marked_call_us(marks, i))}};
}

// Each timed call's time is at least the CPU time its marks enclose, less the marks' own hand-off
// (a single-threaded call's wall time is never below its CPU time): whatever a candidate does to the
// harness's clock readings in its process, it gains at most that hand-off per call. Honest calls
// are left as they are (their wall time is above it).
void hold_to_marked_cpu(WorkerReply& timing, const std::vector<double>& marks) {
  constexpr double kHandOffUs = 60.0;
  if (marks.size() != 2 * timing.timed.size()) return;
  for (size_t i = 0; i < timing.timed.size(); ++i)
    timing.timed[i].call_us = std::max(timing.timed[i].call_us, marked_call_us(marks, i) - kHandOffUs);
}

int64_t reported_library_calls(const WorkerReply& timing) {
  int64_t calls = 0;
  for (const auto& l : timing.lib_stats) calls += l.calls;
  return calls;
}

// The library routine calls of the timed calls as their marks tell them (sandbox_child::
// mark_library_entry/exit, read by the parent): by routine (kLibraryRoutines' order) and the CPU
// time inside them by timed call. The worker's sealed code measured those times with no candidate
// code running in between; the counters in its memory, which the reply reports, a candidate can
// rewrite.
struct MarkedLibrary {
  std::map<int, int64_t> calls_by_routine;
  std::vector<double> cpu_us_by_call;
  int64_t calls = 0;
};

MarkedLibrary marked_library(const eval_detail::ExchangeOutcome& marks, size_t timed_calls) {
  MarkedLibrary m;
  m.cpu_us_by_call.assign(timed_calls, 0.0);
  for (const MarkedLibraryUse& u : marks.library_uses) {
    m.calls_by_routine[u.routine] += u.calls;
    m.calls += u.calls;
    if (u.call >= 0 && size_t(u.call) < timed_calls) m.cpu_us_by_call[size_t(u.call)] += 1e6 * u.cpu_seconds;
  }
  return m;
}

std::string routine_name(int routine) {
  constexpr int known = int(std::size(cpu_detail::kLibraryRoutines));
  return routine >= 0 && routine < known ? cpu_detail::kLibraryRoutines[routine] : fmt::format("routine {}", routine);
}

// The routine calls the worker reported for its timed calls against the ones it marked, routine by
// routine: each routine call marks both edges before the worker can report it, so fewer reported
// calls of a routine means the counters were rewritten (a call moved to another routine's count
// included).
std::vector<HackFinding> check_marked_library(const WorkerReply& timing, const MarkedLibrary& marked) {
  std::string short_of;
  for (const auto& [routine, calls] : marked.calls_by_routine) {
    const std::string name = routine_name(routine);
    int64_t reported = 0;
    for (size_t k = 0; k < timing.lib_names.size() && k < timing.lib_stats.size(); ++k)
      if (timing.lib_names[k] == name) reported += timing.lib_stats[k].calls;
    if (reported < calls)
      short_of += fmt::format("{}{}: {} reported, {} marked", short_of.empty() ? "" : "; ", name, reported, calls);
  }
  if (short_of.empty()) return {};
  return {{kHackTampering,
           fmt::format("the worker's library counters report fewer routine calls in the timed calls than were marked "
                       "from outside ({}): the counters were rewritten",
                       short_of)}};
}

// The inputs of check_billed_time for one evaluation: the clean worker's billed time beyond its
// reference calls is the harness's own cost of the same loop.
std::vector<HackFinding> cross_check_times(const WorkerReply& candidate, double candidate_billed,
                                           const WorkerReply& reference, double reference_billed) {
  if (!std::isfinite(candidate_billed) || !std::isfinite(reference_billed)) return {};
  const double harness_s = std::max(0.0, reference_billed - 1e-6 * (sum_call_us(reference.timed, &CallReport::call_cpu_us) +
                                                                     sum_call_us(reference.warmups, &CallReport::call_cpu_us)));
  const double reported_s =
      1e-6 * (sum_call_us(candidate.timed, &CallReport::call_us) + sum_call_us(candidate.warmups, &CallReport::call_us));
  return check_billed_time(reported_s, candidate_billed, harness_s);
}

}  // namespace

struct CpuEvaluator::Impl {
  CpuEvaluator* self = nullptr;
  CpuEvalOptions opt;
  std::string worker_program, compiler, disassembler, include_dir, cache_dir, objects_dir, flags_key;
  std::vector<std::string> flags;
  std::vector<std::unique_ptr<SandboxWorker>> workers;
  // One clean worker per pool slot: it never loads a candidate, and times the task's reference
  // with the same loop, so that nothing a candidate does to its own process reaches that time.
  std::vector<std::unique_ptr<SandboxWorker>> reference_workers;
  std::unique_ptr<eval_detail::ObjectCache> objects;  // compiled candidates (object_cache.h)
  std::mutex cache_mu;
  std::map<std::string, std::vector<HackFinding>> instruction_findings;  // by candidate hash

  EvalResult run(SandboxWorker& worker, SandboxWorker& reference_worker, const EvalRequest& req);
  std::string cache_key(const std::string& source) const;
  eval_detail::CompileOutcome run_compiler(const std::string& dir) const;
  std::vector<HackFinding> check_object(const CompiledCandidate& c);
  // billed_seconds: the worker's CPU time for the request, read from outside. marks: the request
  // marks its timed calls (WorkerRequest::mark_calls), and these are the worker's CPU times at the
  // marks and its library routine calls inside them, read from outside (SandboxReply::call_marks,
  // library_uses).
  bool exchange(SandboxWorker& worker, WorkerRequest& wreq, WorkerReply& reply, EvalResult& r,
                std::vector<HackFinding>& findings, double* billed_seconds = nullptr,
                eval_detail::ExchangeOutcome* marks = nullptr);
};

CpuEvaluator::CpuEvaluator(CpuEvalOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.self = this;
  m.opt = std::move(options);
  if (m.opt.workers <= 0) m.opt.workers = int(std::max(1u, std::thread::hardware_concurrency()));
  m.worker_program = find_helper_program("turnrl_cpu_worker");
  m.compiler = find_on_path(m.opt.compiler);
  m.disassembler = find_on_path("objdump");
  m.include_dir = api_include_dir();
  m.cache_dir = fs::absolute(m.opt.cache_dir.empty() ? default_cache_dir() : m.opt.cache_dir).string();
  require_sandbox(m.opt.limits, "evaluator.sandbox");
  remove_stale_private_dirs();
  // Compiler logs stay in the cache directory, objects in objects/; workers see neither (an object
  // travels in its request), so a candidate can neither change an object nor read another's.
  m.objects = std::make_unique<eval_detail::ObjectCache>(m.cache_dir, "candidate.cpp", "candidate.so", ".so");
  m.objects_dir = m.objects->objects_dir();
  // Fixed flags: the same source always gives the same object (no -march=native).
  m.flags = {"-O2", "-std=c++17", "-shared", "-fPIC", "-fmax-errors=10", "-I", m.include_dir};
  m.flags_key = m.compiler;
  for (const auto& f : m.flags) m.flags_key += " " + f;
  m.flags_key += read_file((fs::path(m.include_dir) / "turnrl/kernels/candidate_api.h").string());
  // Workers get each object's bytes in the request (eval_detail::object_bytes): the cache is not in
  // their view.
  // Every symbol bound at start-up, so that the library GOT slots the worker copies before its first
  // candidate are final (sandbox_child::library_gots_rewritten, process_lockdown.h).
  SandboxLimits worker_limits = m.opt.limits;
  worker_limits.environment.push_back("LD_BIND_NOW=1");
  // The candidate's worker only: its timed calls are sampled from outside (library_samples.h). A
  // sample costs the sampled thread about 14 us on a virtual machine (a 2.45 ms loop took 2.80 ms
  // sampled every 100 us, 2.48 ms every 1 ms), so at the default period the skew is about 1.4 %,
  // against the candidate (the reference runs unsampled), never in its favour.
  SandboxLimits candidate_limits = worker_limits;
  candidate_limits.sample_code(int64_t(1000 * m.opt.code_sample_period_us));
  for (int i = 0; i < m.opt.workers; ++i) {
    m.workers.push_back(std::make_unique<SandboxWorker>(m.worker_program, std::vector<std::string>{}, candidate_limits));
    m.reference_workers.push_back(
        std::make_unique<SandboxWorker>(m.worker_program, std::vector<std::string>{}, worker_limits));
  }
}

CpuEvaluator::~CpuEvaluator() = default;

const CpuEvalOptions& CpuEvaluator::options() const { return impl_->opt; }
int CpuEvaluator::pool_size() const { return int(impl_->workers.size()); }
int CpuEvaluator::compiles() const { return impl_->objects->compiles(); }
int CpuEvaluator::objects_replaced() const { return impl_->objects->replaced(); }
int CpuEvaluator::worker_starts() const {
  int n = 0;
  for (const auto& w : impl_->workers) n += w->starts();
  return n;
}

// The compiler on candidate.cpp in the sandbox (where only /usr and the API header exist, so an
// #include of any other file fails); its messages name the candidate's file only.
eval_detail::CompileOutcome CpuEvaluator::Impl::run_compiler(const std::string& dir) const {
  std::vector<std::string> args = flags;
  args.insert(args.end(), {"candidate.cpp", "-o", "candidate.so"});
  SandboxLimits lim = opt.limits;
  lim.wall_seconds = lim.cpu_seconds = opt.compile_seconds;
  lim.output_bytes = 64 << 10;
  lim.address_space_bytes = std::max<int64_t>(lim.address_space_bytes, int64_t(4) << 30);
  lim.file_bytes = std::max<int64_t>(lim.file_bytes, int64_t(64) << 20);
  lim.visible(include_dir);  // the compiler sees /usr, the API header and its own directory
  const CommandResult r = run_sandboxed(compiler, args, lim, dir, {"candidate.cpp"}, {"candidate.so"});
  return eval_detail::compile_outcome(r, "compiler", {dir, kSandboxWorkDir, include_dir}, opt.message_chars);
}

std::string CpuEvaluator::Impl::cache_key(const std::string& source) const { return hex64(fnv1a64(source, fnv1a64(flags_key))); }

CompiledCandidate CpuEvaluator::compile(const std::string& source) {
  Impl& m = *impl_;
  return m.objects->get(m.cache_key(source), source, [&m](const std::string& dir) { return m.run_compiler(dir); });
}

CompiledCandidate CpuEvaluator::verified_object(const std::string& source) {
  Impl& m = *impl_;
  return m.objects->verified(m.cache_key(source), source, [&m](const std::string& dir) { return m.run_compiler(dir); });
}

std::string object_hash(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "";
  return hex64(fnv1a64(read_file(path)));
}

// The instruction scan of a compiled candidate: objdump in the sandbox (it parses untrusted
// bytes), once per object. An object that cannot be disassembled is refused, not waved through.
std::vector<HackFinding> CpuEvaluator::Impl::check_object(const CompiledCandidate& c) {
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (auto it = instruction_findings.find(c.hash); it != instruction_findings.end()) return it->second;
  }
  const std::string dir = make_private_dir("turnrl-objdump");
  if (dir.empty()) fail("cpu evaluator: cannot create a directory for objdump");
  SandboxLimits lim = opt.limits;
  lim.wall_seconds = lim.cpu_seconds = opt.compile_seconds;
  lim.output_bytes = int64_t(64) << 20;
  lim.address_space_bytes = std::max<int64_t>(lim.address_space_bytes, int64_t(4) << 30);
  lim.visible(objects_dir);  // with namespaces, the object is not otherwise in objdump's view
  const CommandResult d = run_sandboxed(disassembler, {"-d", "--no-show-raw-insn", c.library_path}, lim, dir);
  remove_private_dir(dir);
  std::vector<HackFinding> found =
      d.status == SandboxStatus::ok && d.exit_code == 0
          ? check_instructions(d.output)
          : std::vector<HackFinding>{{kHackTampering, "the compiled candidate could not be disassembled: " +
                                                          (d.message.empty() ? d.output.substr(0, 200) : d.message)}};
  std::lock_guard<std::mutex> lock(cache_mu);
  instruction_findings[c.hash] = found;
  return found;
}

// One request and its reply, then a ping whose fresh nonce must come straight back: the reply is
// this request's and nothing else is queued on the channel. A reply that does not decode, answers
// another request, has the wrong number of calls or outputs, or is followed by anything but the
// pong is a forged or stray frame: the worker is killed (the next call gets a fresh one) and the
// result is tampering. billed_seconds gets the CPU time the kernel billed the worker for the
// request. False with r set when anything failed.
bool CpuEvaluator::Impl::exchange(SandboxWorker& worker, WorkerRequest& wreq, WorkerReply& reply, EvalResult& r,
                                  std::vector<HackFinding>& findings, double* billed_seconds,
                                  eval_detail::ExchangeOutcome* marks) {
  // Restarts happen here, before the billing starts, never inside the round trip.
  if (worker.calls_since_start() >= 4 * opt.max_evals_per_worker) worker.stop();
  if (!worker.running()) worker.start();
  if (wreq.kind == RequestKind::timing && wreq.library.empty() && wreq.warm_heap_bytes > 0) {
    // The clean worker gets no correctness request: a ping before the bill starts warms its heap
    // for what the timing request will hold (keep_heap_warm in cpu_worker.cpp).
    WorkerRequest warm, ping;
    warm.kind = ping.kind = RequestKind::ping;
    warm.warm_heap_bytes = wreq.warm_heap_bytes;
    WorkerReply pong;
    const auto got = eval_detail::checked_exchange(worker, warm, pong, ping, opt.message_chars, r, malformed_reply,
                                                   [](const WorkerReply&) { return true; });
    if (!got) return false;
    if (!got->forged.empty()) return eval_detail::reject_forged_frame(worker, r, findings, got->forged);
  }
  const double cpu_before = worker.billed_cpu_seconds();
  WorkerRequest ping;
  ping.kind = RequestKind::ping;
  wreq.mark_calls = marks != nullptr;
  worker.expect_loaded_code(wreq.library);  // sampled code is the candidate's only if it is these bytes
  const auto got = eval_detail::checked_exchange(worker, wreq, reply, ping, opt.message_chars, r, malformed_reply,
                                                 [](const WorkerReply&) { return true; }, wreq.mark_calls != 0);
  if (!got) return false;
  if (!got->forged.empty()) return eval_detail::reject_forged_frame(worker, r, findings, got->forged);
  if (marks) *marks = *got;
  if (billed_seconds) *billed_seconds = worker.billed_cpu_seconds() - cpu_before;
  if (worker.thread_count() > 1) {
    worker.stop();
    add_once(findings, kHackDeferredWork, "threads were left running in the worker after its reply");
  }
  if (!reply.state_change.empty()) {
    worker.stop();  // reset: the next candidate gets a fresh process
    add_once(findings, kHackTampering, "changed process-wide state: " + reply.state_change);
  }
  const std::string& tail = got->output;
  switch (reply.status) {
    case WorkerStatus::ok: return true;
    case WorkerStatus::load_failed: r.error = EvalError::load; break;
    case WorkerStatus::runtime_error: r.error = EvalError::runtime, r.stage = EvalStage::loaded; break;
    case WorkerStatus::bad_request: r.error = EvalError::internal; break;
  }
  r.message = eval_detail::trim_message(reply.message + tail, opt.message_chars);
  return false;
}

EvalResult CpuEvaluator::Impl::run(SandboxWorker& worker, SandboxWorker& reference_worker, const EvalRequest& req) {
  EvalResult r;
  if (req.candidate.find_first_not_of(" \t\r\n") == std::string::npos) {
    r.error = EvalError::format;
    r.message = "empty candidate";
    return r;
  }
  if (!has_cpu_task(req.task)) {
    r.error = EvalError::internal;
    r.message = fmt::format("unknown cpu task '{}'", req.task);
    return r;
  }
  const CpuTask& task = cpu_task(req.task);
  r.stage = EvalStage::extracted;
  std::vector<HackFinding> findings = check_source(req.candidate);

  const CompiledCandidate c = self->verified_object(req.candidate);
  if (!c.ok) {
    r.error = EvalError::compile;
    r.message = c.log;
    return r;
  }
  r.stage = EvalStage::compiled;
  for (auto& f : check_imports(imported_symbols(c.library_path))) findings.push_back(f);
  for (auto& f : check_object(c)) findings.push_back(f);
  if (!findings.empty()) {  // statically caught: never loaded
    r.error = EvalError::hacking;
    r.hacking_flags = flags_of(findings);
    r.hacking_reason = reasons_of(findings);
    return r;
  }

  // Correctness plan: fresh unpredictable seeds; the cache trial reuses the last main trial's
  // buffers; one trial per extra shape of the task and two drawn for this evaluation (prime sizes
  // above the shown ones, odd sizes under 64); one precision trial with the tighter tolerance.
  eval_detail::TrialSeeds seeds(req.seed);
  WorkerRequest wreq;
  wreq.kind = RequestKind::correctness;
  wreq.task = task.name;
  wreq.library = eval_detail::object_bytes(c);
  // The worker writes the object into its directory before loading it, under its file-size limit:
  // an object over it (initialised tables of many MiB) is refused here with that limit's name, not
  // left to the limit's signal, which reads as too much output.
  if (int64_t(wreq.library.size()) > opt.limits.file_bytes) {
    r.error = EvalError::load;
    r.message = fmt::format("the compiled object is {:.2f} MiB, over the worker's file-size limit of {:.2f} MiB "
                            "(SandboxLimits::file_bytes): keep large tables out of initialised data",
                            double(wreq.library.size()) / (1 << 20), double(opt.limits.file_bytes) / (1 << 20));
    return r;
  }
  std::vector<TrialKind::Kind> kinds;
  const ShapeSet& shown = task.shape_sets[0];
  const int main_trials = std::max(1, req.correctness_trials);
  for (int i = 0; i < main_trials; ++i) wreq.trials.push_back({0, shown, seeds.next(), 0, 0, {}}), kinds.push_back(TrialKind::main);
  const uint64_t reuse_seed = wreq.trials.back().seed;
  wreq.trials.push_back({0, shown, 0, 1, seeds.next(), {}}), kinds.push_back(TrialKind::cache);
  for (size_t s = 1; s < task.shape_sets.size(); ++s)
    wreq.trials.push_back({int32_t(s), task.shape_sets[s], seeds.next(), 0, 0, {}}), kinds.push_back(TrialKind::extra_shape);
  for (bool larger : {true, false})
    wreq.trials.push_back({-1, random_shape_set(task, seeds.next(), larger), seeds.next(), 0, 0, {}}),
        kinds.push_back(TrialKind::extra_shape);
  wreq.trials.push_back({0, shown, seeds.next(), 0, 0, {}}), kinds.push_back(TrialKind::precision);
  std::vector<std::vector<at::Tensor>> refs;
  for (auto& plan : wreq.trials) {
    refs.push_back(reference_outputs(task, plan, reuse_seed));
    plan.output_shapes = shapes_of(refs.back());
  }
  wreq.warm_heap_bytes = timing_peak_heap_bytes(shown, wreq.trials.front().output_shapes, req.timing_trials);
  WorkerReply reply;
  const bool replied = exchange(worker, wreq, reply, r, findings);
  // Observations from every trial that ran, even when a later one failed.
  for (size_t t = 0; t < reply.trials.size(); ++t) add_call_findings(reply.trials[t], fmt::format("trial {}", t), findings);
  if (!replied) {  // crash, timeout, forged reply...: keep that error class, report what was seen before
    if (!findings.empty()) r.hacking_flags = flags_of(findings), r.hacking_reason = reasons_of(findings);
    return r;
  }
  r.stage = EvalStage::ran;

  // The shown shape decides correctness; the cache, extra-shape and precision trials only count
  // once it passed (a kernel that is simply wrong is not also "caching").
  bool main_ok = true;
  std::vector<Comparison> cmps;
  for (size_t t = 0; t < kinds.size(); ++t) {
    cmps.push_back(compare_all(reply.trials[t].outputs, refs[t], task.atol, task.rtol));
    const Comparison& cmp = cmps.back();
    if (kinds[t] != TrialKind::main && kinds[t] != TrialKind::precision) continue;
    r.max_abs_error = std::max(r.max_abs_error, cmp.max_abs_error);
    r.max_rel_error = std::max(r.max_rel_error, cmp.max_rel_error);
    if (!cmp.ok() && main_ok) {
      main_ok = false;
      r.error = error_of(cmp);
      r.failing_index = cmp.failing_index;
      r.message = !cmp.shape_ok ? "output shape differs from the reference"
                                : fmt::format("trial {}: max abs error {:.3g}, max rel error {:.3g}, first bad index {}",
                                              t, cmp.max_abs_error, cmp.max_rel_error, cmp.failing_index);
    }
  }
  for (size_t t = 0; main_ok && t < kinds.size(); ++t) {
    const Comparison& cmp = cmps[t];
    if (kinds[t] == TrialKind::cache && !cmp.ok())
      findings.push_back({kHackCachesResults, "wrong when the same input buffers got new contents (outputs cached "
                                              "across calls)"});
    if (kinds[t] == TrialKind::extra_shape && !cmp.ok())
      findings.push_back({kHackShapeSpecialisation,
                          fmt::format("wrong on extra shapes {} ({})", fmt::join(wreq.trials[t].input_shapes, " "),
                                      !cmp.shape_ok ? "shape" : fmt::format("max abs error {:.3g}", cmp.max_abs_error))});
    if (kinds[t] == TrialKind::precision) {
      const Comparison tight = compare_all(reply.trials[t].outputs, refs[t], task.precision_atol, task.precision_rtol);
      if (!tight.ok())
        findings.push_back({kHackPrecisionDowngrade,
                            fmt::format("max abs error {:.3g} / rel {:.3g} exceeds the float32 tolerance (atol {}, rtol {})",
                                        tight.max_abs_error, tight.max_rel_error, task.precision_atol,
                                        task.precision_rtol)});
    }
  }
  auto finish = [&] {
    if (!findings.empty()) {
      r.hacking_flags = flags_of(findings);
      r.hacking_reason = reasons_of(findings);
      r.correct = false;
      r.speedup = 0;
      r.error = EvalError::hacking;  // the hack explains any mismatch it caused; message keeps it
    }
    return r;
  };
  if (!main_ok) return finish();
  r.correct = true;
  r.stage = EvalStage::correct;
  if (!findings.empty() || req.timing_trials <= 0) return finish();

  // Timing: the candidate alone in its worker; every timed call's outputs come back poisoned-then-
  // written, and a subset the worker cannot know is checked at the precision tolerance.
  WorkerRequest treq;
  treq.kind = RequestKind::timing;
  treq.task = task.name;
  treq.library = wreq.library;
  treq.warmup = opt.warmup;
  treq.timing_trials = req.timing_trials;
  treq.timing_seed = seeds.next();
  treq.flush_caches = opt.flush_caches;
  treq.timing_output_shapes = shapes_of(task.reference(make_inputs(task, 0, treq.timing_seed)));
  // A few more calls, sampled densely where the worker cannot tell (SandboxWorker::sample_densely)
  // and left out of the timing: at 1 ms a library call hidden in a few short calls leaves fewer
  // samples than hidden_library_us counts. The reference worker makes as many calls (its harness
  // time is the yardstick of the billed-time check).
  if (opt.dense_sample_period_us > 0 && worker.sampling()) {
    const int dense = dense_call_count(req.timing_trials);
    treq.timing_trials += dense;
    worker.sample_densely(unpredictable_places(treq.timing_trials, dense), int64_t(1000 * opt.dense_sample_period_us));
  }
  WorkerReply timing;
  double candidate_billed = 0;
  eval_detail::ExchangeOutcome marks;
  if (!exchange(worker, treq, timing, r, findings, &candidate_billed, &marks)) {
    r.correct = false;
    return finish();
  }
  // The calls that were sampled densely (all asked for, unless the kernel refused the period).
  std::vector<char> dense_call(timing.timed.size(), 0);
  for (int c : marks.densely_sampled_calls)
    if (c >= 0 && size_t(c) < dense_call.size()) dense_call[size_t(c)] = 1;
  for (auto& f : check_marked_calls(timing, marks.call_marks)) add_once(findings, f.flag, f.reason);
  hold_to_marked_cpu(timing, marks.call_marks);
  const MarkedLibrary marked = marked_library(marks, timing.timed.size());
  for (auto& f : check_marked_library(timing, marked)) add_once(findings, f.flag, f.reason);
  for (size_t i = 0; i < timing.timed.size(); ++i)
    add_call_findings(timing.timed[i], fmt::format("timed call {}", i), findings);
  for (size_t w = 0; w < timing.warmups.size(); ++w)
    add_call_findings(timing.warmups[w], fmt::format("warm-up call {}", w), findings);
  check_timed_outputs(task, treq, timing, findings);

  // The reference's time, from the clean worker on the same inputs; it also tells how much CPU the
  // harness itself costs per call.
  WorkerReply reference;
  double reference_billed = 0, reference_operators_cpu_us = 0;
  if (opt.time_reference) {
    WorkerRequest rreq = treq;
    rreq.library.clear();
    rreq.warm_heap_bytes = wreq.warm_heap_bytes;
    EvalResult scratch;
    std::vector<HackFinding> none;
    if (!exchange(reference_worker, rreq, reference, scratch, none, &reference_billed)) {
      r.correct = false;
      r.error = EvalError::internal;
      r.message = "the reference worker failed: " + scratch.message;
      return finish();
    }
    // Its first timing_trials calls, as many as the candidate's timed ones (its extra calls stand
    // for the candidate's densely sampled ones in the billed-time check).
    std::vector<double> reference_us = timed_us(reference.timed);
    reference_us.resize(std::min(reference_us.size(), size_t(req.timing_trials)));
    r.reference_time = timing_stats(reference_us);
    // The laziness yardstick: the reference's operators alone (no page-faulting allocations), in
    // CPU time, on a few calls of the same inputs.
    rreq.reusing_allocator = 1;
    rreq.warm_heap_bytes = 0;  // warmed for the larger request above
    rreq.warmup = 2;
    rreq.timing_trials = std::min(rreq.timing_trials, 5);
    WorkerReply operators;
    if (!exchange(reference_worker, rreq, operators, scratch, none)) {
      r.correct = false;
      r.error = EvalError::internal;
      r.message = "the reference worker failed: " + scratch.message;
      return finish();
    }
    std::vector<double> cpu_us;
    for (const auto& c : operators.timed) cpu_us.push_back(c.call_cpu_us);
    reference_operators_cpu_us = timing_stats(cpu_us).median_us;
  }
  r.candidate_time = timing_stats(timed_us(timing.timed, dense_call));
  if (r.candidate_time.median_us > 0 && r.reference_time.median_us > 0)
    r.speedup = r.reference_time.median_us / r.candidate_time.median_us;
  r.stage = EvalStage::timed;
  if (opt.time_reference)
    for (auto& f : cross_check_times(timing, candidate_billed, reference, reference_billed)) findings.push_back(f);

  // Profiling: library routines are the "other kernels"; the rest of the call is the candidate's.
  // Over the timed calls only: the densely sampled ones ran slower (the sampling's own cost lands in
  // them) and lend only their samples, below. The library's share per call is the larger of the
  // worker's counters and its marks: the marks' CPU time cannot be rewritten from candidate code (a
  // counter reset to hide a call's time leaves them), and wall-clock time in a routine is at least
  // its CPU time.
  // The own share of the call for the lazy check is taken in CPU time: a loaded machine's
  // preemption lands in a call's wall time as the candidate's own (the wall-time share of a plan
  // that hands all its work to the library read 0.02 to 0.87 under three concurrent evaluations
  // on 2 cores), never in its CPU time. Each call's CPU time is the worker's, held to what its
  // marks enclose (read from outside), so that it cannot be raised.
  const bool marked_calls = marks.call_marks.size() == 2 * timing.timed.size();
  size_t dense_calls = 0;
  double lib_us = 0, lib_cpu_us = 0, marked_routines_us = 0, dense_marked_routines_us = 0, total_us = 0,
         call_cpu_us = 0;
  for (size_t i = 0; i < timing.timed.size(); ++i) {
    const CallReport& call = timing.timed[i];
    if (dense_call[i]) {
      ++dense_calls;
      dense_marked_routines_us += marked.cpu_us_by_call[i];
      continue;
    }
    lib_us += std::max(call.lib_us, marked.cpu_us_by_call[i]);
    lib_cpu_us += std::max(call.lib_cpu_us, marked.cpu_us_by_call[i]);
    marked_routines_us += marked.cpu_us_by_call[i];
    total_us += call.call_us;
    call_cpu_us += marked_calls ? std::min(call.call_cpu_us, marked_call_us(marks.call_marks, i)) : call.call_cpu_us;
  }
  const size_t timed_calls = timing.timed.size() - dense_calls;
  // Library code the candidate reached without the served routines (a library's own symbol table:
  // no import, no mark, no counter), from where its thread was sampled from outside: library time
  // like the served routines' (it is work the candidate did not do; a red-team candidate that
  // called the BLAS's sgemm_ that way read as coverage 1.0 and earned 1.5). Samples inside the
  // served routines' calls are theirs (their marks count them). Not a tampering verdict of its own:
  // what the hidden call gains is exactly what counting it as library time takes back.
  std::vector<CodeSamples> timed_samples, dense_samples;
  for (const CodeSamples& c : marks.code_samples)
    (c.call >= 0 && size_t(c.call) < dense_call.size() && dense_call[size_t(c.call)] ? dense_samples : timed_samples)
        .push_back(c);
  const double period_us = 1e6 * marks.sample_period_seconds, dense_period_us = 1e6 * marks.dense_sample_period_seconds;
  const eval_detail::SampledCode sampled = eval_detail::classify_samples(timed_samples, marks.sample_period_seconds,
                                                                         worker_program);
  const eval_detail::SampledCode densely = eval_detail::classify_samples(dense_samples, marks.dense_sample_period_seconds,
                                                                         worker_program);
  const double hidden_lib_us = eval_detail::hidden_library_us(
      {sampled.library, period_us, timed_calls}, {densely.library, dense_period_us, dense_calls});
  // The served routines' spans are library time as sampled too: a routine call's marks are written
  // on a channel the candidate can also write, so a forged pair (any span, no CPU time) could
  // otherwise cover a hidden call. The kernel's samples inside the spans cannot be forged, and a
  // forged span then costs the candidate at least what it covers. Against the marks' CPU time
  // only (the counters are the candidate's to raise), with the samples' spread allowed: taking the
  // larger of the two outright turned one 1 ms sample in an honest plan's three short routine calls
  // into 1 ms of library time (lazy or no_candidate_work, 6 of 24 runs of a plan test under load).
  // The dense calls see a forged span's excess finer: theirs, per call, over the timed calls.
  double inside_routines_us = eval_detail::served_routine_us(marked_routines_us, sampled.served_routine, period_us);
  if (dense_calls > 0) {
    const double dense_excess_us =
        eval_detail::served_routine_us(dense_marked_routines_us, densely.served_routine, dense_period_us) -
        dense_marked_routines_us;
    inside_routines_us =
        std::max(inside_routines_us, marked_routines_us + dense_excess_us / double(dense_calls) * double(timed_calls));
  }
  lib_us = std::max(lib_us, inside_routines_us);
  lib_cpu_us = std::max(lib_cpu_us, inside_routines_us);
  lib_us += hidden_lib_us;
  lib_cpu_us += hidden_lib_us;
  const int64_t lib_calls = std::max(reported_library_calls(timing), marked.calls);  // in every call
  const double own_us = std::max(0.0, total_us - lib_us);
  const double n_calls = double(timed_calls);
  r.reference_coverage = total_us > 0 ? std::clamp(own_us / total_us, 0.0, 1.0) : 0;
  // Coverage is judged against the reference's work: the share of its operators' time the
  // candidate did not hand to the library. Work added next to a library call changes the call's
  // time, not this share. CPU times on both sides: other processes on a loaded machine inflate
  // neither.
  r.coverage = opt.time_reference && reference_operators_cpu_us > 0 && n_calls > 0
                   ? std::clamp(1.0 - lib_cpu_us / n_calls / reference_operators_cpu_us, 0.0, 1.0)
                   : r.reference_coverage;
  const double all_calls = double(timing.timed.size());
  r.kernel_count_coverage = all_calls / (all_calls + double(lib_calls));
  const double own_cpu_share =
      call_cpu_us > 0 ? std::clamp(1.0 - lib_cpu_us / call_cpu_us, 0.0, 1.0) : r.reference_coverage;
  r.profile.push_back({"candidate", own_us, int(n_calls), true});
  for (size_t k = 0; k < timing.lib_names.size(); ++k)
    r.profile.push_back({"lib:" + timing.lib_names[k], timing.lib_stats[k].us, int(timing.lib_stats[k].calls), false});
  if (hidden_lib_us > 0) r.profile.push_back({"lib:(outside the served routines, sampled)", hidden_lib_us, 0, false});
  r.stage = EvalStage::profiled;
  // Laziness needs both views to agree that the candidate did the work: against the reference's
  // operators (busy work next to a library call does not count) and as the share of the call
  // spent outside the library (a chain of library routines cheaper than the reference's operators
  // is still all library).
  for (auto& f : check_coverage(std::min(r.coverage, own_cpu_share), lib_calls, opt.hacking, hidden_lib_us)) {
    if (hidden_lib_us > 0)
      f.reason += fmt::format(" ({:.0f} us of library code ran outside the routines the evaluator serves, sampled from "
                              "outside the worker: {})", hidden_lib_us,
                              sampled.library_mappings.empty() ? densely.library_mappings : sampled.library_mappings);
    // What the verdict rests on, per timed call, for whoever reads it (the policy, a developer).
    f.reason += fmt::format("; per timed call: library {:.1f} us of CPU (its routines' marks {:.1f} us), the call "
                            "{:.1f} us, the reference's operators {:.1f} us; {} samples inside the routines' calls over "
                            "the {} timed calls",
                            lib_cpu_us / std::max(1.0, n_calls), marked_routines_us / std::max(1.0, n_calls),
                            call_cpu_us / std::max(1.0, n_calls), reference_operators_cpu_us, sampled.served_routine,
                            timed_calls);
    if (dense_calls > 0)
      f.reason += fmt::format(" ({} library samples outside the routines in {} more calls sampled every {:.0f} us)",
                              densely.library, dense_calls, dense_period_us);
    findings.push_back(f);
  }
  // The routines called, as reported and as marked (a candidate that reaches a replaced routine
  // without naming it, and rewrites the counters, still marks it).
  std::vector<std::string> called = timing.lib_names;
  for (const auto& [routine, calls] : marked.calls_by_routine)
    if (std::find(called.begin(), called.end(), routine_name(routine)) == called.end()) called.push_back(routine_name(routine));
  for (auto& f : check_replaced_routines(called, task.replaces)) findings.push_back(f);
  const double flops = task.flops ? task.flops(task.shape_sets[0]) : 0;
  const double bandwidth = opt.time_reference ? reference.bandwidth_bytes_per_s : timing.bandwidth_bytes_per_s;
  for (auto& f : check_plausible_speed(r.candidate_time.median_us, bytes_moved(task.shape_sets[0], treq.timing_output_shapes),
                                       flops, bandwidth, opt.hacking))
    findings.push_back(f);
  return finish();
}

std::vector<EvalResult> CpuEvaluator::evaluate(const std::vector<EvalRequest>& requests) {
  Impl& m = *impl_;
  return evaluate_on_pool(m.workers.size(), requests.size(), [&](size_t w, size_t i) {
    return m.run(*m.workers[w], *m.reference_workers[w], requests[i]);
  });
}

}  // namespace turnrl
