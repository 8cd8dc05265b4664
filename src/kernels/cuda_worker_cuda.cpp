// The sandboxed worker of the CUDA evaluator backend (turnrl_cuda_worker): one process per GPU.
// Per request it computes the reference outputs of every trial first (before any of the
// candidate's code is loaded), loads the candidate the parent compiled (a cubin through the driver
// API, a launcher through dlopen; from the bytes its request carries, hash-checked), runs the
// correctness trials with poisoned outputs surrounded by guard bands, times reference and candidate
// with CUDA events on a dedicated stream (L2 flushed before every run, order alternating), and
// profiles randomly chosen timed calls with CUPTI's activity API. A sticky CUDA error ends the
// worker after its reply: the parent starts a new one.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "turnrl/core/hash.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/kernels/cuda_launch.h"
#include "turnrl/kernels/cuda_protocol.h"
#include "turnrl/kernels/cuda_tasks.h"
#include "turnrl/kernels/sandbox.h"

namespace turnrl::cuda_detail {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A CUDA error the candidate caused after its launch (asynchronous): the context is unusable.
struct DeviceFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A refused launch or a non-zero launcher return: this candidate fails, the worker goes on.
struct CandidateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw DeviceFault(fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}

std::string driver_error(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &text);
  return fmt::format("{} ({})", name ? name : "?", text ? text : "?");
}

// ---- CUPTI activity collection -------------------------------------------------------------

struct ActivityRecord {
  std::string name;
  uint64_t start = 0, end = 0;
  uint32_t stream = 0;
  bool marker = false;  // one of the worker's window markers (below), not the candidate's work
};

// Each profiled call is bracketed by two tiny memsets on the evaluator's stream. Their CUPTI
// records carry device timestamps on the same clock as the candidate's kernels, so "still running
// after the call's stream was done" compares device times with device times: host timestamps
// (cuptiGetTimestamp after the stop event) are converted from another clock and flagged honest
// multi-kernel candidates that ended within microseconds of the stop event.
constexpr uint32_t kMarkerValue = 0xA7;
constexpr uint64_t kMarkerBytes = 4093;

std::mutex g_records_mu;
std::vector<ActivityRecord> g_records;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBytes));
  *size = *buffer ? kBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_records_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
      g_records.push_back({k->name ? k->name : "?", k->start, k->end, k->streamId});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
      g_records.push_back({"memcpy", m->start, m->end, m->streamId});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
      g_records.push_back({"memset", m->start, m->end, m->streamId, m->value == kMarkerValue && m->bytes == kMarkerBytes});
    }
  }
  free(buffer);
}

void check_cupti(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS) {
    const char* s = nullptr;
    cuptiGetResultString(r, &s);
    throw std::runtime_error(fmt::format("CUPTI {}: {}", what, s ? s : "?"));
  }
}

// ---- the compiled candidate ----------------------------------------------------------------

using LaunchFn = int (*)(const float* const*, float* const*, const long long*, cudaStream_t);

struct Compiled {
  bool ok = false;
  std::string log;
  CudaCandidateForm form = CudaCandidateForm::kernel;
  CUmodule module = nullptr;
  CUfunction kernel = nullptr;
  LaunchFn launch = nullptr;
  CudaLaunchShape shape;
  std::vector<std::string> kernel_names;
};

struct Device {
  int ordinal = 0;
  cudaDeviceProp prop{};
  std::string arch;  // sm_90a
  cudaStream_t stream = nullptr;
  uint32_t stream_id = 0;
  double bandwidth = 0;
  double fp32_flops = 0;
  at::Tensor flush_buffer;
  at::Tensor marker_buffer;  // target of the profiling window markers
  bool cupti_ready = false;
  std::mt19937_64 rng;  // guard bands, perturbed places, profiled calls: seeded from std::random_device at start
  std::map<std::string, Compiled> compiled;  // by object hash: kernel modules until the next evaluation of their source, launchers for the worker's life
};

// The candidate the parent compiled (cuda_compile.h), loaded from the bytes its request carries
// (the parent's cache is not in this worker's view) once they hash to what the parent recorded. A
// kernel-form module is loaded afresh for every evaluation (about a millisecond), so `__device__`
// state a candidate kept from an earlier evaluation of the same source cannot replay old results.
// Launcher-form shared objects stay loaded (written into this worker's own directory, dlopen'ed and
// removed, their code sealed: sandbox_child::load_shared_object); their function statics are within
// one evaluation caught by the cache trial.
Compiled load_object(const CudaWorkerRequest& req) {
  Compiled c;
  c.form = cuda_candidate_form(req.source);
  c.kernel_names = cuda_kernel_names(req.source);
  try {
    if (c.form == CudaCandidateForm::kernel) c.shape = parse_launch_shape(req.source);
  } catch (const Error& e) {
    c.log = e.what();
    return c;
  }
  const std::string& image = req.object;
  if (image.empty() || hex64(fnv1a64(image)) != req.object_hash) {
    c.log = "the compiled object's bytes differ from what the evaluator compiled; not loaded";
    return c;
  }
  if (c.form == CudaCandidateForm::kernel) {
    CUresult r = cuModuleLoadData(&c.module, image.data());
    if (r != CUDA_SUCCESS) {
      c.log = "cuModuleLoadData: " + driver_error(r);
      return c;
    }
    r = cuModuleGetFunction(&c.kernel, c.module, "turnrl_kernel");
    if (r != CUDA_SUCCESS) {
      c.log = "the module defines no extern \"C\" __global__ void turnrl_kernel(...): " + driver_error(r);
      cuModuleUnload(c.module);
      c.module = nullptr;
      return c;
    }
    if (c.shape.shared_bytes > 48 * 1024)
      cuFuncSetAttribute(c.kernel, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, c.shape.shared_bytes);
  } else {
    std::string why;
    void* handle = sandbox_child::load_shared_object(image, why);
    if (!handle) {
      c.log = "dlopen: " + why;
      return c;
    }
    c.launch = reinterpret_cast<LaunchFn>(dlsym(handle, "turnrl_launch"));
    if (!c.launch) {
      c.log = "the shared object exports no extern \"C\" turnrl_launch";
      return c;
    }
  }
  c.ok = true;
  return c;
}

void forget_kernel_module(Device& dev, const CudaWorkerRequest& req) {
  auto it = dev.compiled.find(req.object_hash);
  if (it == dev.compiled.end() || !it->second.module) return;
  cuModuleUnload(it->second.module);
  dev.compiled.erase(it);
}

Compiled& load(Device& dev, const CudaWorkerRequest& req) {
  auto it = dev.compiled.find(req.object_hash);
  if (it != dev.compiled.end() && it->second.ok) return it->second;
  return dev.compiled[req.object_hash] = load_object(req);
}

// ---- buffers -------------------------------------------------------------------------------

constexpr int64_t kGuard = 4096;                 // the shortest guard band, in floats
constexpr float kGuardValue = -1.2345678e-37f;   // guard values: this times a random factor in [1, 2)

at::TensorOptions cuda_floats(const Device& dev) { return at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, dev.ordinal); }

at::Tensor make_input(const Device& dev, const InputSpec& spec, const Shape& shape, at::Generator& gen) {
  if (spec.distribution == InputSpec::uniform) return at::empty(shape, cuda_floats(dev)).uniform_(spec.a, spec.b, gen);
  return at::empty(shape, cuda_floats(dev)).normal_(spec.a, spec.b, gen);
}

at::Generator generator(const Device& dev, uint64_t seed) {
  at::Generator gen = at::cuda::detail::createCUDAGenerator(static_cast<c10::DeviceIndex>(dev.ordinal));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
  return gen;
}

std::vector<at::Tensor> make_inputs(const Device& dev, const CudaTask& task, const ShapeSet& shapes, uint64_t seed) {
  at::Generator gen = generator(dev, seed);
  std::vector<at::Tensor> in;
  for (size_t i = 0; i < shapes.size(); ++i) in.push_back(make_input(dev, task.inputs[i], shapes[i], gen));
  return in;
}

// The inputs' shapes of a trial: drawn for this evaluation, or one of the task's sets.
const ShapeSet& trial_shapes(const CudaTask& task, const CudaTrialPlan& p) {
  if (!p.shapes.empty()) {
    if (p.shapes.size() != task.inputs.size())
      throw std::runtime_error(fmt::format("cuda worker: {} drawn shapes for {} inputs", p.shapes.size(), task.inputs.size()));
    return p.shapes;
  }
  return task.shape_sets.at(size_t(p.shape_set));
}

// Outputs live inside larger allocations with guard bands on both sides, each of a random length
// (kGuard to 4 kGuard floats) and filled with a value drawn per allocation: a stray write can
// neither aim just past a band it cannot measure nor restore a value it cannot know.
// TURNRL_CUDA_GUARD_BANDS=0 (a diagnostic, with PYTORCH_NO_CUDA_MEMORY_CACHING=1) gives each output
// an allocation of exactly its size, so that compute-sanitizer's memcheck sees a stray write as out
// of bounds.
bool guard_bands_on() {
  static const bool on = [] {
    const char* v = std::getenv("TURNRL_CUDA_GUARD_BANDS");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

struct GuardedOutputs {
  std::vector<at::Tensor> storage, views;
  std::vector<int64_t> front, back;  // guard floats before and after each output
  float guard_value = kGuardValue;
  void allocate(Device& dev, const std::vector<at::Tensor>& like) {
    storage.clear(), views.clear(), front.clear(), back.clear();
    std::uniform_int_distribution<int64_t> length(kGuard, 4 * kGuard);
    // A normal float around -1e-37 with a random mantissa: nothing a task kernel writes.
    guard_value = kGuardValue * std::uniform_real_distribution<float>(1.0f, 2.0f)(dev.rng);
    for (const auto& r : like) {
      const int64_t f = guard_bands_on() ? length(dev.rng) : 0, b = guard_bands_on() ? length(dev.rng) : 0;
      at::Tensor s = at::empty({r.numel() + f + b}, cuda_floats(dev));
      storage.push_back(s);
      views.push_back(s.narrow(0, f, r.numel()).view(r.sizes()));
      front.push_back(f), back.push_back(b);
    }
  }
  void poison() {
    for (size_t k = 0; k < storage.size(); ++k) {
      storage[k].fill_(guard_value);
      views[k].fill_(std::numeric_limits<float>::quiet_NaN());
    }
  }
  bool guards_intact() const {
    for (size_t k = 0; k < storage.size(); ++k) {
      const int64_t n = storage[k].numel();
      if (front[k] > 0 && !storage[k].narrow(0, 0, front[k]).eq(guard_value).all().item<bool>()) return false;
      if (back[k] > 0 && !storage[k].narrow(0, n - back[k], back[k]).eq(guard_value).all().item<bool>()) return false;
    }
    return true;
  }
};

// The call's outputs against the reference's at both tolerances, on the GPU with compare_all over
// tensors (compare_outputs's verdict to the bit): only the verdicts reach the host and cross the
// pipe, not the outputs (up to 64 MiB each; copying and comparing them on the host cost about a
// second per evaluation).
// precision = false leaves precision_tolerance passing (timed calls outside the checked subset).
void compare_both(const CudaTask& task, const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& ref,
                  CudaCallReport& rep, bool precision = true) {
  for (const auto& r : ref) rep.shapes.emplace_back(r.sizes().begin(), r.sizes().end());
  rep.task_tolerance = compare_all(got, ref, task.atol, task.rtol);
  if (precision) rep.precision_tolerance = compare_all(got, ref, task.precision_atol, task.precision_rtol);
}

// ---- running the candidate -----------------------------------------------------------------

void run_candidate(Device& dev, const Compiled& c, const CudaTask& task, const std::vector<at::Tensor>& in,
                   const std::vector<at::Tensor>& out, const std::vector<int64_t>& dims) {
  std::vector<const float*> in_ptr;
  std::vector<float*> out_ptr;
  for (const auto& t : in) in_ptr.push_back(t.data_ptr<float>());
  for (const auto& t : out) out_ptr.push_back(t.data_ptr<float>());
  if (c.form == CudaCandidateForm::launcher) {
    std::vector<long long> d(dims.begin(), dims.end());
    const int rc = c.launch(in_ptr.data(), out_ptr.data(), d.data(), dev.stream);
    if (rc != 0) throw CandidateError(fmt::format("turnrl_launch returned {}", rc));
    return;
  }
  std::vector<int> int_dims;
  for (int64_t d : dims) int_dims.push_back(int(d));
  std::vector<void*> args;
  for (auto& p : in_ptr) args.push_back(&p);
  for (auto& p : out_ptr) args.push_back(&p);
  for (auto& d : int_dims) args.push_back(&d);
  const CudaGrid g = cuda_grid(task, dims, c.shape);
  const CUresult r = cuLaunchKernel(c.kernel, unsigned(g.x), unsigned(g.y), 1, unsigned(c.shape.block_x),
                                    unsigned(c.shape.block_y), 1, unsigned(c.shape.shared_bytes),
                                    reinterpret_cast<CUstream>(dev.stream), args.data(), nullptr);
  if (r != CUDA_SUCCESS)
    throw CandidateError(fmt::format("cuLaunchKernel(grid {}x{}, block {}x{}, shared {} B): {}", g.x, g.y,
                                     c.shape.block_x, c.shape.block_y, c.shape.shared_bytes, driver_error(r)));
}

// Waits for the candidate's work; an error here was caused by the candidate's kernels.
void finish_candidate(Device& dev) {
  const cudaError_t e = cudaStreamSynchronize(dev.stream);
  if (e != cudaSuccess) throw DeviceFault(fmt::format("{} ({})", cudaGetErrorName(e), cudaGetErrorString(e)));
  const cudaError_t late = cudaGetLastError();
  if (late != cudaSuccess) throw DeviceFault(fmt::format("{} ({})", cudaGetErrorName(late), cudaGetErrorString(late)));
}

std::vector<at::Tensor> run_reference(const CudaTask& task, const std::vector<at::Tensor>& in) {
  std::vector<at::Tensor> out;
  for (auto& t : task.reference(in)) out.push_back(t.contiguous().to(at::kFloat));
  return out;
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& in) {
  std::vector<at::Tensor> out;
  for (const auto& t : in) out.push_back(t.clone());
  return out;
}

// ---- request handlers ----------------------------------------------------------------------

void correctness(Device& dev, const CudaTask& task, const CudaWorkerRequest& req, CudaWorkerReply& reply) {
  // References first, while no candidate code is loaded in this process.
  struct Trial {
    std::vector<at::Tensor> inputs;  // contents for this trial
    std::vector<at::Tensor> reference;
  };
  std::vector<Trial> trials;
  for (size_t t = 0; t < req.trials.size(); ++t) {
    const CudaTrialPlan& p = req.trials[t];
    Trial tr;
    if (p.reuse) {
      require(t > 0, "cuda worker: the first trial cannot reuse buffers");
      tr.inputs = clones(trials[t - 1].inputs);
      at::Generator gen = generator(dev, p.tail_seed);
      for (size_t i = 0; i < tr.inputs.size(); ++i) {
        at::Tensor flat = tr.inputs[i].view(-1);
        const int64_t half = flat.numel() / 2;
        flat.narrow(0, half, flat.numel() - half)
            .copy_(make_input(dev, task.inputs[i], {flat.numel() - half}, gen));
      }
    } else {
      tr.inputs = make_inputs(dev, task, trial_shapes(task, p), p.seed);
    }
    tr.reference = run_reference(task, tr.inputs);
    trials.push_back(std::move(tr));
  }
  forget_kernel_module(dev, req);
  Compiled& c = load(dev, req);
  if (!c.ok) {
    reply.status = CudaWorkerStatus::load_failed;
    reply.message = c.log;
    return;
  }
  const auto t0 = Clock::now();
  std::vector<at::Tensor> buffers;  // the candidate's input buffers (kept across a reuse trial)
  GuardedOutputs out;
  for (size_t t = 0; t < trials.size(); ++t) {
    const CudaTrialPlan& p = req.trials[t];
    if (p.reuse) {
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(trials[t].inputs[i]);
    } else {
      buffers = clones(trials[t].inputs);
      out.allocate(dev, trials[t].reference);
    }
    out.poison();
    const std::vector<int64_t> dims = task.dims(trial_shapes(task, p));
    check_cuda(cudaDeviceSynchronize(), "before the candidate");
    CudaCallReport rep;
    run_candidate(dev, c, task, buffers, out.views, dims);
    finish_candidate(dev);
    check_cuda(cudaDeviceSynchronize(), "after the candidate");  // work left on other streams
    compare_both(task, out.views, trials[t].reference, rep);
    rep.out_of_bounds = !out.guards_intact();
    for (size_t i = 0; i < buffers.size(); ++i)
      if (!at::equal(buffers[i], trials[t].inputs[i])) rep.mutated_inputs = 1;
    reply.trials.push_back(std::move(rep));
  }
  reply.seconds_correctness = since(t0);
}

void flush_l2(Device& dev, int salt) {
  check_cuda(cudaMemsetAsync(dev.flush_buffer.data_ptr(), salt & 0xff, size_t(dev.flush_buffer.numel()), dev.stream),
             "L2 flush");
}

void ensure_flush_buffer(Device& dev, double l2_flush_mib) {
  const double flush_bytes = l2_flush_mib > 0 ? l2_flush_mib * (1 << 20) : 2.0 * dev.prop.l2CacheSize;
  if (!dev.flush_buffer.defined() || dev.flush_buffer.numel() != int64_t(flush_bytes))
    dev.flush_buffer = at::empty({int64_t(flush_bytes)}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, dev.ordinal));
}

// Before every timed call, the same bytes for both sides of the pair: a floating input is its base
// (unperturbed) copy with every element scaled; any other gets fresh values of its own distribution
// at 1 to n/64 + 1 random places. Content-keyed caches miss, and a candidate cannot know where to
// look for what changed.
void perturb_inputs(Device& dev, const CudaTask& task, const std::vector<at::Tensor>& base, std::vector<at::Tensor>& in,
                    at::Generator& gen) {
  for (size_t k = 0; k < in.size(); ++k) {
    at::Tensor flat = in[k].view(-1);
    const int64_t n = flat.numel();
    if (n == 0) continue;
    if (at::isFloatingType(in[k].scalar_type())) {
      // Every element, by its own factor in [0.75, 1.25) of the unperturbed input: a candidate that
      // keeps the last call's inputs and result finds everything changed (with a few changed places,
      // rank-1 corrections of a kept matmul result were exact and 8.6x cheaper on the CPU backend).
      const at::Tensor factor = at::rand(in[k].sizes(), gen, in[k].options().dtype(at::kFloat)) * 0.5 + 0.75;
      in[k].copy_(base[k] * factor);
      continue;
    }
    const int64_t places = std::uniform_int_distribution<int64_t>(1, n / 64 + 1)(dev.rng);
    const at::Tensor where =
        at::randint(n, {places}, gen, at::TensorOptions().dtype(at::kLong).device(at::kCUDA, dev.ordinal));
    flat.index_copy_(0, where, make_input(dev, task.inputs[k], {places}, gen));
  }
}

// The persisting-L2 set-aside (a device limit) and the stream's access-policy window keep data in
// L2 across the evaluator's flush, for whichever side runs next. What a call left set ("" when
// nothing), after which both are reset. The queries' own errors (a device without persisting L2)
// are cleared: they are not the candidate's. The limit is the GPU's, shared by every process on
// it: another process that sets it (a second evaluator's candidate on the same GPU) is read here
// as this call's doing, so an evaluator must own its GPUs (seen on an H100 when CUDA test
// programs ran side by side: honest candidates flagged with the 9,830,400 bytes a pinning
// candidate of another program had set). A limit already set when an evaluation's timing begins
// (left by an earlier process, whose worker died with it set, or the device's own setting) is
// cleared then, before the first candidate call, and not counted against the candidate (an H100,
// 2026-12-05, one test program alone: honest candidates flagged at the first check).
void clear_l2_state(Device& dev) {
  cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);
  const cudaStreamAttrValue none{};
  cudaStreamSetAttribute(dev.stream, cudaStreamAttributeAccessPolicyWindow, &none);
  cudaCtxResetPersistingL2Cache();
  cudaGetLastError();
}

std::string take_l2_state(Device& dev) {
  std::string changed;
  size_t persisting = 0;
  if (cudaDeviceGetLimit(&persisting, cudaLimitPersistingL2CacheSize) == cudaSuccess && persisting > 0)
    changed = fmt::format("set a persisting-L2 cache of {} bytes", persisting);
  cudaStreamAttrValue window{};
  if (cudaStreamGetAttribute(dev.stream, cudaStreamAttributeAccessPolicyWindow, &window) == cudaSuccess &&
      window.accessPolicyWindow.num_bytes > 0) {
    if (!changed.empty()) changed += "; ";
    changed += fmt::format("set an L2 access-policy window of {} bytes on the evaluator's stream",
                           size_t(window.accessPolicyWindow.num_bytes));
  }
  if (!changed.empty()) clear_l2_state(dev);
  cudaGetLastError();
  return changed;
}

struct CudaEvents {
  cudaEvent_t start = nullptr, stop = nullptr;
  CudaEvents() {
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~CudaEvents() { cudaEventDestroy(start), cudaEventDestroy(stop); }
  CudaEvents(const CudaEvents&) = delete;
  CudaEvents& operator=(const CudaEvents&) = delete;
  double elapsed_us() const {
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return 1000.0 * double(ms);
  }
};

// CUPTI activity (kernels, copies and sets on every stream) during the profiled calls. Each
// candidate call is bracketed by two tiny marker memsets on the evaluator's stream; their records
// carry device timestamps on the same clock as the candidate's kernels.
void start_profiling(Device& dev) {
  if (!dev.cupti_ready) {
    check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
    CUcontext ctx = nullptr;
    cuCtxGetCurrent(&ctx);
    check_cupti(cuptiGetStreamIdEx(ctx, reinterpret_cast<CUstream>(dev.stream), 0, &dev.stream_id), "stream id");
    dev.cupti_ready = true;
  }
  if (!dev.marker_buffer.defined())
    dev.marker_buffer = at::empty({int64_t(kMarkerBytes)}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, dev.ordinal));
  std::lock_guard<std::mutex> lock(g_records_mu);
  g_records.clear();
}

void set_activity(bool on) {
  for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET})
    if (on) check_cupti(cuptiActivityEnable(kind), "enable");
    else cuptiActivityDisable(kind);
}

void mark(Device& dev) {
  check_cuda(cudaMemsetAsync(dev.marker_buffer.data_ptr(), int(kMarkerValue), kMarkerBytes, dev.stream), "marker");
}

// The candidate's share of the records: on the evaluator's stream, what started inside a call's
// markers (the reference, flushes, poisoning and copies run outside them); on any other stream,
// everything from the first call on (the evaluator uses no other stream), charged to the call last
// opened before it and late when it ended after that call's closing marker. Should CUPTI have
// dropped a marker record, the host windows (before the opening marker, after the stop event)
// assign records to calls, and nothing is judged late (the per-call output checks still are).
std::vector<CudaProfiledKernel> candidate_kernels(const Device& dev, const Compiled& c,
                                                  const std::vector<std::pair<uint64_t, uint64_t>>& host_windows) {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_records_mu);
  std::vector<uint64_t> marks;
  for (const auto& r : g_records)
    if (r.marker && r.stream == dev.stream_id) marks.push_back(r.start);
  std::sort(marks.begin(), marks.end());
  const bool device_windows = marks.size() == 2 * host_windows.size();
  std::vector<std::pair<uint64_t, uint64_t>> windows = host_windows;
  if (device_windows)
    for (size_t w = 0; w < windows.size(); ++w) windows[w] = {marks[2 * w], marks[2 * w + 1]};
  std::map<std::string, CudaProfiledKernel> by_name;
  for (const auto& r : g_records) {
    if (r.marker || windows.empty() || r.start < windows.front().first) continue;
    size_t w = 0;
    while (w + 1 < windows.size() && r.start >= windows[w + 1].first) ++w;
    const bool other_stream = r.stream != dev.stream_id;
    if (!other_stream && r.start >= windows[w].second) continue;  // the evaluator's own work
    CudaProfiledKernel& k = by_name[r.name];
    k.name = r.name;
    k.us += 1e-3 * double(r.end - r.start);
    k.calls += 1;
    k.own = r.name != "memcpy" && r.name != "memset" && is_own_kernel(r.name, c.kernel_names);
    if (other_stream) k.other_stream = 1;
    // 1 us of slack for timestamp granularity; work deferred to another stream runs for longer.
    if (device_windows && r.end > windows[w].second + 1000) k.after_timer = 1;
  }
  g_records.clear();
  std::vector<CudaProfiledKernel> out;
  for (auto& [name, k] : by_name) out.push_back(k);
  return out;
}

// How many timed calls, chosen at random, are also checked at the precision tolerance: a few, as
// the correctness trials' one precision trial is (every call is checked at the task's tolerance).
constexpr int kPrecisionChecks = 3;

// Timing and profiling in one loop of timing_trials + profile_calls iterations. Each iteration
// changes the inputs at random places (both sides get the same bytes), flushes L2 before each
// side and runs the two between CUDA events in alternating order. profile_calls iterations, chosen
// at random, run under CUPTI and are kept out of the timing statistics: a candidate cannot tell a
// profiled call from a timed one. Every candidate call's outputs are NaN-poisoned before it, copied
// as soon as its stop event is reached on the stream (work deferred to another stream is not there
// yet) and compared with that iteration's reference; its inputs are compared with their snapshot,
// its guard bands checked, and the L2 state it could have set read and reset.
void timing_and_profile(Device& dev, const CudaTask& task, const CudaWorkerRequest& req, CudaWorkerReply& reply) {
  std::vector<at::Tensor> in = make_inputs(dev, task, task.shape_sets[0], req.timing_seed);
  const std::vector<at::Tensor> base = clones(in);  // each timed call's inputs are drawn from it
  const std::vector<at::Tensor> first_reference = run_reference(task, in);
  Compiled& c = load(dev, req);  // loaded by the correctness call
  if (!c.ok) {
    reply.status = CudaWorkerStatus::load_failed;
    reply.message = c.log;
    return;
  }
  GuardedOutputs out;
  out.allocate(dev, first_reference);
  out.poison();
  const std::vector<int64_t> dims = task.dims(task.shape_sets[0]);
  ensure_flush_buffer(dev, req.l2_flush_mib);
  clear_l2_state(dev);  // what this evaluation's candidate calls then leave set is theirs

  const auto t0 = Clock::now();
  for (int i = 0; i < req.warmup; ++i) {
    run_reference(task, in);
    run_candidate(dev, c, task, in, out.views, dims);
  }
  finish_candidate(dev);
  reply.state_change = take_l2_state(dev);

  const int profiled_calls = std::max(0, req.profile_calls);
  const int total = std::max(0, req.timing_trials) + profiled_calls;
  std::vector<int> order(static_cast<size_t>(total));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), dev.rng);
  std::vector<char> profiled(size_t(total), 0), precision_checked(size_t(total), 0);
  for (int j = 0; j < profiled_calls; ++j) profiled[size_t(order[size_t(j)])] = 1;
  std::shuffle(order.begin(), order.end(), dev.rng);
  for (int j = 0; j < std::min(total, kPrecisionChecks); ++j) precision_checked[size_t(order[size_t(j)])] = 1;
  if (profiled_calls > 0) start_profiling(dev);
  std::vector<std::pair<uint64_t, uint64_t>> host_windows;
  double profiling_seconds = 0;
  at::Generator gen = generator(dev, req.timing_seed ^ dev.rng());
  CudaEvents reference_events, candidate_events;
  for (int i = 0; i < total; ++i) {
    perturb_inputs(dev, task, base, in, gen);
    const std::vector<at::Tensor> snapshot = clones(in);
    out.poison();
    const bool profile = profiled[size_t(i)];
    if (profile) set_activity(true);
    uint64_t host_open = 0, host_close = 0;
    std::vector<at::Tensor> reference, got;
    const bool reference_first = i % 2 == 0;
    for (int half = 0; half < 2; ++half) {
      const bool is_reference = (half == 0) == reference_first;
      const CudaEvents& ev = is_reference ? reference_events : candidate_events;
      flush_l2(dev, i * 2 + half);
      if (!is_reference && profile) {
        cuptiGetTimestamp(&host_open);
        mark(dev);
      }
      check_cuda(cudaEventRecord(ev.start, dev.stream), "cudaEventRecord");
      if (is_reference) reference = run_reference(task, in);
      else run_candidate(dev, c, task, in, out.views, dims);
      check_cuda(cudaEventRecord(ev.stop, dev.stream), "cudaEventRecord");
      if (is_reference) continue;
      if (profile) mark(dev);
      for (const auto& v : out.views) got.push_back(v.clone());  // in stream order, right behind the stop event
      if (profile) {
        const cudaError_t e = cudaEventSynchronize(ev.stop);
        if (e != cudaSuccess) throw DeviceFault(fmt::format("{} ({})", cudaGetErrorName(e), cudaGetErrorString(e)));
        cuptiGetTimestamp(&host_close);
      }
    }
    finish_candidate(dev);
    check_cuda(cudaDeviceSynchronize(), "after a timed call");  // work left on other streams
    const double candidate_us = candidate_events.elapsed_us();
    if (profile) {
      set_activity(false);
      host_windows.emplace_back(host_open, host_close);
      reply.profiled_call_us += candidate_us;
    } else {
      reply.reference_us.push_back(reference_events.elapsed_us());
      reply.candidate_us.push_back(candidate_us);
    }
    CudaCallReport rep;
    compare_both(task, got, reference, rep, precision_checked[size_t(i)] != 0);
    rep.out_of_bounds = !out.guards_intact();
    for (size_t k = 0; k < in.size(); ++k)
      if (!at::equal(in[k], snapshot[k])) rep.mutated_inputs = 1;
    if (const std::string state = take_l2_state(dev); !state.empty() && reply.state_change.empty())
      reply.state_change = state;
    ++reply.checked_calls;
    const bool failed = !rep.task_tolerance.ok() || !rep.precision_tolerance.ok() || rep.out_of_bounds || rep.mutated_inputs;
    if (reply.failing_call < 0) {  // keeps the first failing call's report, else the last one's
      reply.recheck = std::move(rep);
      if (failed) reply.failing_call = i;
    }
  }
  reply.seconds_timing = since(t0);
  if (profiled_calls > 0) {
    const auto t1 = Clock::now();
    reply.profile = candidate_kernels(dev, c, host_windows);
    reply.profiled_calls = profiled_calls;
    profiling_seconds = since(t1);
  }
  reply.seconds_profiling = profiling_seconds;
}

// The reference alone, timed as timing_and_profile times it (same inputs from the seed, the same
// perturbations, flushes and events), in a worker that never loads a candidate: a measurement
// nothing a candidate does to its own process can reach.
void reference_timing(Device& dev, const CudaTask& task, const CudaWorkerRequest& req, CudaWorkerReply& reply) {
  std::vector<at::Tensor> in = make_inputs(dev, task, task.shape_sets[0], req.timing_seed);
  const std::vector<at::Tensor> base = clones(in);
  ensure_flush_buffer(dev, req.l2_flush_mib);
  const auto t0 = Clock::now();
  for (int i = 0; i < req.warmup; ++i) run_reference(task, in);
  check_cuda(cudaDeviceSynchronize(), "after the warm-up");
  at::Generator gen = generator(dev, req.timing_seed ^ dev.rng());
  CudaEvents ev;
  for (int i = 0; i < req.timing_trials; ++i) {
    perturb_inputs(dev, task, base, in, gen);
    flush_l2(dev, i);
    check_cuda(cudaEventRecord(ev.start, dev.stream), "cudaEventRecord");
    run_reference(task, in);
    check_cuda(cudaEventRecord(ev.stop, dev.stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(ev.stop), "cudaEventSynchronize");
    reply.reference_us.push_back(ev.elapsed_us());
  }
  reply.seconds_timing = since(t0);
}

void measure_device(Device& dev) {
  check_cuda(cudaGetDeviceProperties(&dev.prop, dev.ordinal), "cudaGetDeviceProperties");
  dev.arch = fmt::format("sm_{}{}{}", dev.prop.major, dev.prop.minor, dev.prop.major >= 9 ? "a" : "");
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev.ordinal);
  dev.fp32_flops = double(dev.prop.multiProcessorCount) * 128.0 * 2.0 * double(clock_khz) * 1e3;
  // Device-to-device copy bandwidth (read + write), the memory bound of the plausibility check.
  const int64_t bytes = int64_t(256) << 20;
  at::Tensor a = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, dev.ordinal));
  at::Tensor b = at::empty_like(a);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  check_cuda(cudaMemcpyAsync(b.data_ptr(), a.data_ptr(), size_t(bytes), cudaMemcpyDeviceToDevice, dev.stream), "copy");
  cudaEventRecord(e0, dev.stream);
  for (int i = 0; i < 5; ++i) cudaMemcpyAsync(b.data_ptr(), a.data_ptr(), size_t(bytes), cudaMemcpyDeviceToDevice, dev.stream);
  cudaEventRecord(e1, dev.stream);
  check_cuda(cudaEventSynchronize(e1), "bandwidth probe");
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  dev.bandwidth = ms > 0 ? 5.0 * 2.0 * double(bytes) / (1e-3 * ms) : 0;
  cudaEventDestroy(e0), cudaEventDestroy(e1);
}

// What the first requests would set up lazily, set up before the candidate seccomp profile goes on:
// CUPTI's callbacks and its activity thread, LibTorch's cuBLAS handle, the marker buffer.
void warm_up(Device& dev) {
  start_profiling(dev);
  set_activity(true);
  mark(dev);
  const at::Tensor m = at::ones({64, 64}, at::TensorOptions().device(at::kCUDA, dev.ordinal));
  const at::Tensor product = at::matmul(m, m.to(at::kBFloat16).to(at::kFloat));
  check_cuda(cudaDeviceSynchronize(), "warm-up");
  set_activity(false);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_records_mu);
  g_records.clear();
}

CudaWorkerReply handle(Device& dev, const std::string& frame) {
  CudaWorkerReply reply;
  CudaWorkerRequest req;
  try {
    req = decode<CudaWorkerRequest>(frame);
  } catch (const std::exception& e) {
    reply.status = CudaWorkerStatus::bad_request;
    reply.message = e.what();
    return reply;
  }
  reply.nonce = req.nonce;
  if (req.kind == CudaRequestKind::ping) return reply;
  reply.device = fmt::format("{} ({})", dev.prop.name, dev.arch);
  reply.bandwidth_bytes_per_s = dev.bandwidth;
  reply.fp32_flops = dev.fp32_flops;
  if (!has_cuda_task(req.task)) {
    reply.status = CudaWorkerStatus::bad_request;
    reply.message = fmt::format("unknown cuda task '{}'", req.task);
    return reply;
  }
  const CudaTask& task = cuda_task(req.task);
  c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromExternal(dev.stream, static_cast<c10::DeviceIndex>(dev.ordinal)));
  try {
    switch (req.kind) {
      case CudaRequestKind::correctness: correctness(dev, task, req, reply); break;
      case CudaRequestKind::timing: timing_and_profile(dev, task, req, reply); break;
      case CudaRequestKind::reference_timing: reference_timing(dev, task, req, reply); break;
      case CudaRequestKind::ping: break;
    }
  } catch (const CandidateError& e) {
    reply.status = CudaWorkerStatus::runtime_error;
    reply.message = e.what();
    // A refused launch leaves no sticky error, but a launcher may have: probe the context.
    if (cudaDeviceSynchronize() != cudaSuccess || cudaGetLastError() != cudaSuccess) reply.status = CudaWorkerStatus::device_fault;
  } catch (const DeviceFault& e) {
    reply.status = CudaWorkerStatus::device_fault;
    reply.message = e.what();
  } catch (const c10::Error& e) {
    // A LibTorch call failed after the candidate ran: its kernels broke the context.
    reply.status = CudaWorkerStatus::device_fault;
    reply.message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    reply.status = CudaWorkerStatus::runtime_error;
    reply.message = e.what();
  }
  return reply;
}

}  // namespace

// The parent picks the GPU through CUDA_VISIBLE_DEVICES, so the worker always uses ordinal 0:
// a launcher-form candidate's own (static) CUDA runtime then lands on the same device.
int cuda_worker_main(int, char**) {
  Device dev;
  std::random_device entropy;
  dev.rng.seed((uint64_t(entropy()) << 32) ^ entropy());
  sandbox_child::install_crash_reporter();
  try {
    check_cuda(cudaSetDevice(dev.ordinal), "cudaSetDevice");
    check_cuda(cudaFree(nullptr), "context creation");
    check_cuda(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuInit(0);
    measure_device(dev);
    warm_up(dev);
  } catch (const std::exception& e) {
    fmt::print(stderr, "turnrl_cuda_worker: cannot use GPU {}: {}\n", dev.ordinal, e.what());
    return 2;
  }
  // The candidate profile's refusals (no new processes or programs, no sockets, signals to this
  // process only; threads stay allowed: the driver and CUPTI have their own), without its
  // allow-list: which calls the driver makes after set-up has not been listed on a GPU yet. This
  // worker compiles nothing, the parent does. Tools that inject themselves (compute-sanitizer,
  // Nsight) talk to their front end over sockets, so under them the profile stays off.
  if (std::getenv("CUDA_INJECTION64_PATH"))
    fmt::print(stderr, "turnrl_cuda_worker: CUDA_INJECTION64_PATH is set (a CUDA tool); no candidate seccomp profile\n");
  else
    sandbox_child::confine_candidate(/*gpu_driver=*/true);
  sandbox_child::say_hello();
  std::string request;
  while (sandbox_child::read_request(request)) {
    sandbox_child::arm_cpu_limit();
    const CudaWorkerReply reply = handle(dev, request);
    sandbox_child::write_reply(encode(reply));
    if (reply.status == CudaWorkerStatus::device_fault) _exit(3);  // the context is unusable
  }
  return 0;
}

}  // namespace turnrl::cuda_detail
