#include "turnrl/kernels/cuda_backend.h"

#include <unistd.h>

extern char** environ;

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#ifdef TURNRL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cuda_compile.h"
#include "trial_seeds.h"
#include "worker_round_trip.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/cpu_backend.h"  // compare_outputs, timing_stats
#include "turnrl/kernels/cuda_protocol.h"
#include "turnrl/kernels/cuda_tasks.h"

namespace turnrl {
namespace fs = std::filesystem;
using cuda_detail::CudaCallReport;
using cuda_detail::CudaRequestKind;
using cuda_detail::CudaTrialPlan;
using cuda_detail::CudaWorkerReply;
using cuda_detail::CudaWorkerRequest;
using cuda_detail::CudaWorkerStatus;

namespace {

std::string find_nvcc(const std::string& configured) {
  std::vector<std::string> candidates;
  if (!configured.empty()) candidates.push_back(configured);
  if (const char* home = std::getenv("CUDA_HOME")) candidates.push_back(std::string(home) + "/bin/nvcc");
  candidates.push_back("/usr/local/cuda/bin/nvcc");
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (!dir.empty()) candidates.push_back(dir + "/nvcc");
  for (const auto& c : candidates)
    if (::access(c.c_str(), X_OK) == 0) return fs::absolute(c).string();
  return "";  // launcher-form candidates then fail with a message saying so
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("TURNRL_EVAL_CACHE")) return std::string(d) + "/cuda";
  const char* tmp = std::getenv("TMPDIR");
  return fmt::format("{}/turnrl-cuda-cache-{}", tmp && *tmp ? tmp : "/tmp", getuid());
}

// The architecture NVRTC and nvcc compile for on GPU `ordinal`: sm_XY, with the "a" of the
// architecture-specific features from Hopper on (sm_90a), as the worker's own probe reports it.
std::string device_arch(int ordinal) {
#ifdef TURNRL_WITH_CUDA
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal) != cudaSuccess)
    fail("evaluator.cuda.devices: cannot read the compute capability of GPU {}", ordinal);
  return fmt::format("sm_{}{}{}", major, minor, major >= 9 ? "a" : "");
#else
  fail("evaluator.backend: 'cuda' needs a turnrl built with CUDA (GPU {})", ordinal);
#endif
}

// The physical id behind a visible ordinal, so that the worker's CUDA_VISIBLE_DEVICES names it.
std::string physical_device(int ordinal) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!visible || !*visible) return std::to_string(ordinal);
  std::stringstream ss(visible);
  std::string id;
  for (int i = 0; std::getline(ss, id, ','); ++i)
    if (i == ordinal) return id;
  fail("evaluator.cuda.devices: ordinal {} is not visible (CUDA_VISIBLE_DEVICES={})", ordinal, visible);
}

EvalError error_of(const Comparison& c) {
  if (!c.shape_ok) return EvalError::shape;
  if (!c.finite) return EvalError::nonfinite;
  return EvalError::mismatch;
}

enum class TrialKind { main, cache, extra_shape, precision };

std::string shape_set_text(const ShapeSet& shapes) {
  std::vector<std::string> each;
  for (const auto& s : shapes) each.push_back(fmt::format("[{}]", fmt::join(s, ", ")));
  return fmt::format("{}", fmt::join(each, " "));
}

std::string bad_time(const std::vector<double>& times, const char* what) {
  for (double t : times)
    if (!std::isfinite(t) || t < 0) return fmt::format("{} time {}", what, t);
  return "";
}

// Why a decoded reply cannot be the worker's answer to req ("" when it can): the nonce, and the
// number of trials, timed, profiled and checked calls the request implies, and finite times.
std::string malformed_reply(const CudaWorkerRequest& req, const CudaWorkerReply& reply) {
  if (reply.nonce != req.nonce) return "the reply answers another request (nonce)";
  const bool ok = reply.status == CudaWorkerStatus::ok;
  const bool candidate_timed = !reply.candidate_us.empty() || !reply.profile.empty() || reply.checked_calls != 0 ||
                               reply.profiled_calls != 0 || reply.profiled_call_us != 0;
  const bool timed = candidate_timed || !reply.reference_us.empty();
  const size_t timed_calls = size_t(std::max(0, req.timing_trials));
  switch (req.kind) {
    case CudaRequestKind::ping:
      return ok && reply.trials.empty() && !timed ? "" : "a ping got a full reply";
    case CudaRequestKind::correctness:
      if (timed) return "timed calls in a correctness reply";
      if (reply.trials.size() > req.trials.size() || (ok && reply.trials.size() != req.trials.size()))
        return fmt::format("{} trials for {} requested", reply.trials.size(), req.trials.size());
      return "";
    case CudaRequestKind::reference_timing:
      if (!reply.trials.empty() || candidate_timed) return "candidate calls in a reference timing reply";
      if (ok && reply.reference_us.size() != timed_calls)
        return fmt::format("{} reference times for {} requested", reply.reference_us.size(), timed_calls);
      return bad_time(reply.reference_us, "reference");
    case CudaRequestKind::timing:
      if (!reply.trials.empty()) return "correctness trials in a timing reply";
      if (ok) {
        const int32_t profiled = std::max(0, req.profile_calls);
        if (reply.reference_us.size() != timed_calls || reply.candidate_us.size() != timed_calls)
          return fmt::format("{} reference and {} candidate times for {} requested", reply.reference_us.size(),
                             reply.candidate_us.size(), timed_calls);
        if (reply.profiled_calls != profiled)
          return fmt::format("{} profiled calls for {} requested", reply.profiled_calls, profiled);
        if (reply.checked_calls != int32_t(timed_calls) + profiled)
          return fmt::format("{} checked calls for {}", reply.checked_calls, int32_t(timed_calls) + profiled);
      }
      if (reply.failing_call < -1 || reply.failing_call >= reply.checked_calls)
        return fmt::format("failing call {} of {}", reply.failing_call, reply.checked_calls);
      if (!std::isfinite(reply.profiled_call_us) || reply.profiled_call_us < 0)
        return fmt::format("profiled call time {}", reply.profiled_call_us);
      for (const auto& k : reply.profile)
        if (!std::isfinite(k.us) || k.us < 0 || k.calls < 0) return fmt::format("profile entry '{}'", k.name);
      if (std::string why = bad_time(reply.reference_us, "reference"); !why.empty()) return why;
      return bad_time(reply.candidate_us, "candidate");
  }
  return "unknown request kind";
}

// What the timing reply's per-call checks found: every timed and profiled call was checked at the
// task's tolerance (and a random few at the float32 precision tolerance) against that call's
// reference, its inputs against their snapshot, its guard bands, and the device's L2 state.
void add_timed_call_findings(const CudaTask& task, const CudaWorkerReply& timing, std::vector<HackFinding>& findings) {
  if (!timing.state_change.empty())
    add_once(findings, kHackTampering, "a candidate call changed device state: " + timing.state_change);
  const CudaCallReport& c = timing.recheck;
  const std::string call = timing.failing_call >= 0 ? fmt::format("timed call {}", timing.failing_call) : "a timed call";
  if (c.out_of_bounds) add_once(findings, kHackOutOfBoundsWrite, call + ": a guard band around an output was written");
  if (c.mutated_inputs) add_once(findings, kHackMutatesInputs, call + ": the inputs changed during the call");
  if (!c.task_tolerance.ok())
    add_once(findings, kHackDeferredWork,
             fmt::format("{} returned wrong outputs when its stop event was reached (max abs error {:.3g}): the work "
                         "differs when timed, or was deferred past the timer (e.g. to another stream)",
                         call, c.task_tolerance.max_abs_error));
  else if (!c.precision_tolerance.ok())
    add_once(findings, kHackPrecisionDowngrade,
             fmt::format("{}: max abs error {:.3g} exceeds the float32 tolerance (atol {}, rtol {}; precision dropped "
                         "when timed)",
                         call, c.precision_tolerance.max_abs_error, task.precision_atol, task.precision_rtol));
}

}  // namespace

int visible_cuda_devices() {
#ifdef TURNRL_WITH_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
  return 0;
#endif
}

struct CudaEvaluator::Impl {
  CudaEvalOptions opt;
  std::string worker_program, cache_dir;
  // Candidates are compiled here, in the sandbox, into a cache only this process writes
  // (cuda_compile.h); workers see its objects read-only.
  std::unique_ptr<eval_detail::ObjectCache> objects;
  eval_detail::CudaCompiler compiler;
  std::vector<std::string> device_arch;  // per GPU: sm_90a, ...
  std::vector<std::unique_ptr<SandboxWorker>> workers;  // workers_per_device per GPU, in device order
  // Per GPU: a worker that never loads candidate code, where the reference is timed, the times it
  // measured (by task), and the lock that keeps measurements on the GPU from overlapping: the
  // correctness and timing requests of its workers and the reference's timing hold it.
  std::vector<std::unique_ptr<SandboxWorker>> reference_workers;
  std::vector<std::map<std::string, TimingStats>> reference_times;
  std::vector<std::unique_ptr<std::mutex>> device_locks;
  std::vector<PhaseSeconds> phase_seconds;

  EvalResult run(size_t device, SandboxWorker& worker, const EvalRequest& req, PhaseSeconds& phases);
  bool call(SandboxWorker& worker, CudaWorkerRequest& wreq, CudaWorkerReply& reply, EvalResult& r,
            std::vector<HackFinding>& findings);
  const TimingStats* reference_time(size_t device, const CudaWorkerRequest& like, EvalResult& r);
};

CudaEvaluator::CudaEvaluator(CudaEvalOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = std::move(options);
#ifndef TURNRL_WITH_CUDA
  fail("evaluator.backend: 'cuda' needs a turnrl built with CUDA (LibTorch with CUDA and the CUDA toolkit); this "
       "build has none");
#endif
  if (m.opt.devices.empty()) {
    const int n = visible_cuda_devices();
    if (n == 0) fail("evaluator.backend: 'cuda' found no visible GPU (CUDA_VISIBLE_DEVICES={})",
                     std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset");
    for (int d = 0; d < n; ++d) m.opt.devices.push_back(d);
  }
  require(m.opt.workers_per_device >= 1, "evaluator.workers: at least one worker per GPU");
  m.worker_program = find_helper_program("turnrl_cuda_worker");
  m.cache_dir = fs::absolute(m.opt.cache_dir.empty() ? default_cache_dir() : m.opt.cache_dir).string();
  require_sandbox(m.opt.limits, "evaluator.sandbox");
  remove_stale_private_dirs();
  m.objects = eval_detail::make_cuda_object_cache(m.cache_dir);
  m.compiler.nvrtc_program = find_helper_program("turnrl_nvrtc");
  m.compiler.nvcc = find_nvcc(m.opt.nvcc);
  m.compiler.limits = m.opt.limits;
  m.compiler.seconds = m.opt.compile_seconds;
  m.compiler.message_chars = m.opt.message_chars;
  m.compiler.nvrtc_servers = eval_detail::make_nvrtc_servers(m.compiler);
  for (int d : m.opt.devices) {
    m.device_arch.push_back(device_arch(d));
    SandboxLimits lim = m.opt.limits;
    // Workers load what the parent compiled from the bytes their request carries: nothing of the
    // cache is in their view (docs/evaluator.md). A launcher links cuBLAS from the toolkit; the
    // driver needs /sys and the /dev/nvidia* files.
    lim.visible("/sys");
    if (!m.compiler.nvcc.empty()) lim.visible(fs::path(m.compiler.nvcc).parent_path().parent_path().string());
    for (const auto& e : fs::directory_iterator("/dev"))
      if (e.path().filename().string().rfind("nvidia", 0) == 0) lim.devices.push_back(e.path().string());
    lim.scratch_bytes = std::max<int64_t>(lim.scratch_bytes, int64_t(1) << 30);
    lim.environment.push_back("CUDA_VISIBLE_DEVICES=" + physical_device(d));
    // The parent's CUDA settings reach the worker, and so do tools that inject themselves through
    // the environment (compute-sanitizer, Nsight: CUDA_INJECTION64_PATH, NV_*, LD_PRELOAD).
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      if (kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
      for (const char* prefix : {"CUDA_", "NV_", "NVIDIA_", "NVTX_", "LD_PRELOAD=", "PYTORCH_NO_CUDA_MEMORY_CACHING=",
                                 "TURNRL_CUDA_GUARD_BANDS="})
        if (kv.rfind(prefix, 0) == 0) {
          lim.environment.push_back(kv);
          break;
        }
    }
    for (int k = 0; k < m.opt.workers_per_device; ++k)
      m.workers.push_back(std::make_unique<SandboxWorker>(m.worker_program, std::vector<std::string>{}, lim));
    m.reference_workers.push_back(std::make_unique<SandboxWorker>(m.worker_program, std::vector<std::string>{}, lim));
    m.reference_times.emplace_back();
    m.device_locks.push_back(std::make_unique<std::mutex>());
  }
}

CudaEvaluator::~CudaEvaluator() = default;

const CudaEvalOptions& CudaEvaluator::options() const { return impl_->opt; }
int CudaEvaluator::pool_size() const { return int(impl_->workers.size()); }
int CudaEvaluator::worker_starts() const {
  int n = 0;
  for (const auto& w : impl_->workers) n += w->starts();
  return n;
}
const std::vector<CudaEvaluator::PhaseSeconds>& CudaEvaluator::last_phase_seconds() const { return impl_->phase_seconds; }

// One request and its checked reply (checked_exchange: nonce, ping, strict counts): a frame that is
// not the worker's answer (a launcher-form candidate can write() on the inherited channel) kills
// the worker and is tampering. False with r set when anything failed.
bool CudaEvaluator::Impl::call(SandboxWorker& worker, CudaWorkerRequest& wreq, CudaWorkerReply& reply, EvalResult& r,
                               std::vector<HackFinding>& findings) {
  // Restarts happen here, between evaluations' requests, never between a request and its ping.
  if (worker.calls_since_start() >= 4 * opt.max_evals_per_worker) worker.stop();
  CudaWorkerRequest ping;
  ping.kind = CudaRequestKind::ping;
  const auto got = eval_detail::checked_exchange(
      worker, wreq, reply, ping, opt.message_chars, r, malformed_reply,
      [](const CudaWorkerReply& answer) { return answer.status != CudaWorkerStatus::device_fault; });
  if (!got) return false;
  if (!got->forged.empty()) return eval_detail::reject_forged_frame(worker, r, findings, got->forged);
  // After a sticky error the worker exits: reap it now so the next request starts a fresh one.
  if (reply.status == CudaWorkerStatus::device_fault) worker.stop();
  const std::string& tail = got->output;
  switch (reply.status) {
    case CudaWorkerStatus::ok: return true;
    case CudaWorkerStatus::load_failed: r.error = EvalError::load, r.stage = EvalStage::compiled; break;
    case CudaWorkerStatus::runtime_error: r.error = EvalError::runtime, r.stage = EvalStage::loaded; break;
    case CudaWorkerStatus::device_fault:
      r.error = EvalError::crash, r.stage = EvalStage::loaded;
      reply.message = "sticky CUDA error: " + reply.message + " (the worker was restarted)";
      break;
    case CudaWorkerStatus::bad_request: r.error = EvalError::internal; break;
  }
  r.message = eval_detail::trim_message(reply.message + tail, opt.message_chars);
  return false;
}

// The reference's time on a GPU (the caller holds its lock), measured once per task in the GPU's
// reference worker, which never loads candidate code: what the speedup divides, so that nothing a
// candidate does in its own process can slow the reference down. Null with r set on failure.
const TimingStats* CudaEvaluator::Impl::reference_time(size_t device, const CudaWorkerRequest& like, EvalResult& r) {
  auto& known = reference_times[device];
  if (const auto it = known.find(like.task); it != known.end()) return &it->second;
  CudaWorkerRequest req;
  req.kind = CudaRequestKind::reference_timing;
  req.task = like.task;
  req.warmup = like.warmup;
  req.timing_trials = like.timing_trials;
  req.timing_seed = like.timing_seed;
  req.l2_flush_mib = like.l2_flush_mib;
  CudaWorkerReply reply;
  EvalResult own;
  std::vector<HackFinding> reference_findings;  // none can be the candidate's: it never ran there
  if (!call(*reference_workers[device], req, reply, own, reference_findings)) {
    r.error = EvalError::internal;
    r.message = "timing the reference in its own worker failed: " + own.message +
                (reference_findings.empty() ? "" : " (" + reasons_of(reference_findings) + ")");
    return nullptr;
  }
  return &(known[like.task] = timing_stats(reply.reference_us));
}

EvalResult CudaEvaluator::Impl::run(size_t device, SandboxWorker& worker, const EvalRequest& req, PhaseSeconds& phases) {
  EvalResult r;
  if (req.candidate.find_first_not_of(" \t\r\n") == std::string::npos) {
    r.error = EvalError::format;
    r.message = "empty candidate";
    return r;
  }
  if (!has_cuda_task(req.task)) {
    r.error = EvalError::internal;
    r.message = fmt::format("unknown cuda task '{}'; known: {}", req.task, fmt::join(cuda_task_names(), ", "));
    return r;
  }
  const CudaTask& task = cuda_task(req.task);
  r.stage = EvalStage::extracted;
  std::vector<HackFinding> findings;
  // The device's own clock read from the kernel would let a candidate time itself against the
  // evaluator; there is no honest use for it in a task kernel.
  if (req.candidate.find("globaltimer") != std::string::npos)
    findings.push_back({kHackTampering, "reads %globaltimer (the device clock)"});

  // Compiled before the GPU's lock is taken: compiles of its workers run on the CPU cores in parallel.
  const CompiledCandidate object =
      eval_detail::compile_cuda_candidate(*objects, compiler, req.candidate, device_arch[device]);
  phases.compile = object.seconds;
  if (!object.ok) {
    r.error = EvalError::compile;
    r.message = eval_detail::trim_message(object.log.empty() ? "the compiler gave no message" : object.log,
                                          opt.message_chars);
    if (!findings.empty()) r.hacking_flags = flags_of(findings), r.hacking_reason = reasons_of(findings);
    return r;
  }
  r.stage = EvalStage::compiled;

  eval_detail::TrialSeeds seeds(req.seed);
  CudaWorkerRequest wreq;
  wreq.task = task.name;
  wreq.source = req.candidate;
  try {
    wreq.object = eval_detail::object_bytes(object);
  } catch (const Error& e) {  // changed since it was hashed (verified() has just checked it)
    r.error = EvalError::internal;
    r.message = e.what();
    return r;
  }
  wreq.object_hash = object.object_hash;
  wreq.warmup = opt.warmup;
  wreq.profile_calls = opt.profile_calls;
  wreq.l2_flush_mib = opt.l2_flush_mib;
  std::vector<TrialKind> kinds;
  for (int i = 0; i < std::max(1, req.correctness_trials); ++i)
    wreq.trials.push_back({0, seeds.next(), 0, 0, {}}), kinds.push_back(TrialKind::main);
  wreq.trials.push_back({0, 0, 1, seeds.next(), {}}), kinds.push_back(TrialKind::cache);
  for (size_t s = 1; s < task.shape_sets.size(); ++s)
    wreq.trials.push_back({int32_t(s), seeds.next(), 0, 0, {}}), kinds.push_back(TrialKind::extra_shape);
  // Two shape sets drawn for this evaluation (as the CPU backend does): every size of the shown set
  // replaced by a prime above it, or by an odd size under 64.
  for (bool larger : {true, false})
    wreq.trials.push_back({-1, seeds.next(), 0, 0, random_shape_set(task.shape_sets, seeds.next(), larger)}),
        kinds.push_back(TrialKind::extra_shape);
  wreq.trials.push_back({0, seeds.next(), 0, 0, {}}), kinds.push_back(TrialKind::precision);

  CudaWorkerReply reply;
  // The GPU's measurements never overlap: its other workers wait while this one runs correctness
  // trials, the reference's timing and its timed calls.
  std::unique_lock<std::mutex> measuring(*device_locks[device]);
  const bool replied = call(worker, wreq, reply, r, findings);
  phases.correctness = reply.seconds_correctness;
  for (size_t t = 0; t < reply.trials.size(); ++t) {
    if (reply.trials[t].out_of_bounds)
      add_once(findings, kHackOutOfBoundsWrite, fmt::format("trial {}: a guard band around an output was written", t));
    if (reply.trials[t].mutated_inputs)
      add_once(findings, kHackMutatesInputs, fmt::format("trial {}: the inputs changed during the call", t));
  }
  auto finish = [&] {
    if (!findings.empty()) {
      r.hacking_flags = flags_of(findings);
      r.hacking_reason = reasons_of(findings);
      r.correct = false;
      r.speedup = 0;
      r.error = EvalError::hacking;
    }
    return r;
  };
  if (!replied) {
    if (!findings.empty()) r.hacking_flags = flags_of(findings), r.hacking_reason = reasons_of(findings);
    return r;
  }
  r.stage = EvalStage::ran;
  if (reply.trials.size() != kinds.size()) {
    r.error = EvalError::internal;
    r.message = fmt::format("cuda worker returned {} trials for {}", reply.trials.size(), kinds.size());
    return r;
  }

  bool main_ok = true;
  for (size_t t = 0; t < kinds.size(); ++t) {
    if (kinds[t] != TrialKind::main && kinds[t] != TrialKind::precision) continue;
    const Comparison cmp = reply.trials[t].task_tolerance;
    r.max_abs_error = std::max(r.max_abs_error, cmp.max_abs_error);
    r.max_rel_error = std::max(r.max_rel_error, cmp.max_rel_error);
    if (!cmp.ok() && main_ok) {
      main_ok = false;
      r.error = error_of(cmp);
      r.failing_index = cmp.failing_index;
      r.message = !cmp.shape_ok ? "output shape differs from the reference"
                                : fmt::format("trial {}: max abs error {:.3g}, max rel error {:.3g}, first bad index {}", t,
                                              cmp.max_abs_error, cmp.max_rel_error, cmp.failing_index);
    }
  }
  for (size_t t = 0; main_ok && t < kinds.size(); ++t) {
    const CudaCallReport& rep = reply.trials[t];
    const Comparison cmp = rep.task_tolerance;
    if (kinds[t] == TrialKind::cache && !cmp.ok())
      add_once(findings, kHackCachesResults, "wrong when the same input buffers got new contents (outputs cached across calls)");
    if (kinds[t] == TrialKind::extra_shape && !cmp.ok())
      add_once(findings, kHackShapeSpecialisation,
               fmt::format("wrong on {} ({})",
                           wreq.trials[t].shapes.empty() ? fmt::format("extra shape set {}", wreq.trials[t].shape_set)
                                                         : "drawn shapes " + shape_set_text(wreq.trials[t].shapes),
                           !cmp.shape_ok ? "shape" : fmt::format("max abs error {:.3g}", cmp.max_abs_error)));
    if (kinds[t] == TrialKind::precision) {
      const Comparison tight = rep.precision_tolerance;
      if (!tight.ok())
        add_once(findings, kHackPrecisionDowngrade,
                 fmt::format("max abs error {:.3g} / rel {:.3g} exceeds the float32 tolerance (atol {}, rtol {})",
                             tight.max_abs_error, tight.max_rel_error, task.precision_atol, task.precision_rtol));
    }
  }
  if (!main_ok) return finish();
  r.correct = true;
  r.stage = EvalStage::correct;
  if (!findings.empty() || req.timing_trials <= 0) return finish();

  CudaWorkerRequest treq = wreq;
  treq.kind = CudaRequestKind::timing;
  treq.trials.clear();
  treq.timing_trials = req.timing_trials;
  treq.timing_seed = seeds.next();
  const TimingStats* clean_reference = reference_time(device, treq, r);
  if (!clean_reference) {
    r.correct = false;
    return finish();
  }
  CudaWorkerReply timing;
  if (!call(worker, treq, timing, r, findings)) {
    r.correct = false;
    return finish();
  }
  measuring.unlock();
  phases.timing = timing.seconds_timing;
  phases.profiling = timing.seconds_profiling;
  add_timed_call_findings(task, timing, findings);
  r.reference_time = *clean_reference;
  r.candidate_time = timing_stats(timing.candidate_us);
  if (r.candidate_time.median_us > 0) r.speedup = r.reference_time.median_us / r.candidate_time.median_us;
  r.stage = EvalStage::timed;

  double own_us = 0, all_us = 0;
  int64_t own_calls = 0, all_calls = 0, library_calls = 0;
  for (const auto& k : timing.profile) {
    std::string name = k.name;
    if (k.other_stream) name += " [other stream]";
    r.profile.push_back({name, k.us, k.calls, bool(k.own)});
    all_us += k.us;
    all_calls += k.calls;
    if (k.own) own_us += k.us, own_calls += k.calls;
    else library_calls += k.calls;
    if (k.after_timer)
      add_once(findings, kHackDeferredWork,
               fmt::format("'{}' was still running after the evaluator's stop event completed", k.name));
  }
  std::sort(r.profile.begin(), r.profile.end(), [](const ProfiledKernel& a, const ProfiledKernel& b) { return a.device_us > b.device_us; });
  if (timing.profiled_calls > 0) {
    // Coverage is judged against the reference's work (class 5, as on the CPU backend): the share
    // of the reference's time the candidate did not hand to library kernels, copies and sets.
    // Work added next to a library call changes neither the library's time nor the reference's.
    const double own_share = all_us > 0 ? std::clamp(own_us / all_us, 0.0, 1.0) : 0;
    const double library_us_per_call = (all_us - own_us) / double(timing.profiled_calls);
    r.coverage = r.reference_time.median_us > 0
                     ? std::clamp(1.0 - library_us_per_call / r.reference_time.median_us, 0.0, 1.0)
                     : own_share;
    r.reference_coverage = timing.profiled_call_us > 0 ? std::clamp(own_us / timing.profiled_call_us, 0.0, 1.0) : 0;
    r.kernel_count_coverage = all_calls > 0 ? double(own_calls) / double(all_calls) : 0;
    r.stage = EvalStage::profiled;
    if (all_calls == 0)
      add_once(findings, kHackNoCandidateWork, "no kernel, memcpy or memset ran on the device during the profiled calls");
    // Lazy unless both views say the candidate did the work: against the reference's time, and as
    // the share of device time in its own kernels (a chain of library kernels cheaper than the
    // reference is still all library).
    for (auto& f : check_coverage(std::min(r.coverage, own_share), library_calls, opt.hacking))
      add_once(findings, f.flag, f.reason);
  }
  HackingThresholds t = opt.hacking;
  t.peak_gflops = timing.fp32_flops > 0 ? timing.fp32_flops / 1e9 : t.peak_gflops;
  std::vector<Shape> out_shapes;
  for (const auto& s : timing.recheck.shapes) out_shapes.push_back(s);
  const double flops = task.flops ? task.flops(task.shape_sets[0]) : 0;
  for (auto& f : check_plausible_speed(r.candidate_time.median_us, bytes_moved(task.shape_sets[0], out_shapes), flops,
                                       timing.bandwidth_bytes_per_s, t))
    add_once(findings, f.flag, f.reason);
  return finish();
}

std::vector<EvalResult> CudaEvaluator::evaluate(const std::vector<EvalRequest>& requests) {
  Impl& m = *impl_;
  m.phase_seconds.assign(requests.size(), PhaseSeconds{});
  const size_t per_device = size_t(m.opt.workers_per_device);
  return evaluate_on_pool(m.workers.size(), requests.size(), [&](size_t w, size_t i) {
    return m.run(w / per_device, *m.workers[w], requests[i], m.phase_seconds[i]);
  });
}

}  // namespace turnrl
