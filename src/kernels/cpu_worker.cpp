// The sandboxed side of the CPU backend: loads a compiled candidate, runs the correctness trials
// the parent planned (the parent computes the reference outputs and compares: the reference's
// outputs never exist in this process during those calls), then times the candidate on perturbed
// inputs. The same program serves as the clean reference worker, which never loads a candidate and
// times the task's reference with the same loop. Everything this process reports is checked by the
// parent against what the kernel billed it (docs/evaluator.md, "What the parent trusts").
#include <dirent.h>
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include "turnrl/kernels/candidate_api.h"
#include "turnrl/kernels/cpu_protocol.h"
#include "turnrl/kernels/cpu_tasks.h"
#include "turnrl/kernels/sandbox.h"

namespace turnrl::cpu_detail {
namespace {

using Clock = std::chrono::steady_clock;
double micros(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

// ---- the instrumented library --------------------------------------------------------------------
enum LibOp { kMatmul, kSoftmaxRows, kSumRows, kMaxRows, kAddBiasRows, kAdd, kMul, kExp, kTanh, kRelu, kSigmoid, kNumOps };
static_assert(std::size(kLibraryRoutines) == kNumOps);
LibStat g_lib[kNumOps];

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
}

// CPU time as well as wall-clock time: laziness compares the library's CPU time with the
// reference's, which other processes on a loaded machine do not inflate.
double g_lib_cpu_us = 0;

// A routine call's edges are also marked to the parent (sandbox_child::mark_library_entry/exit),
// with the routine and the thread's CPU clock at each edge: these counters, and t0/c0 below on the
// stack, live in memory the candidate can write (snapshot before its library calls, restore after;
// or from a rewritten GOT slot of a library the routine calls), the marks do not. Every signal is
// blocked between the edges, so no handler of the candidate's runs inside a routine (to write a
// forged exit mark, or to jump out of the routine from a fault it provoked there); a fault there
// kills the worker.
struct LibTimer {
  explicit LibTimer(LibOp o) : op(o) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved_mask);
    if (!sandbox_child::mark_library_entry(op)) _exit(3);  // the parent is gone
    t0 = Clock::now();
    c0 = thread_cpu_us();
  }
  ~LibTimer() {
    const double cpu_us = thread_cpu_us() - c0;
    g_lib[op].us += micros(t0, Clock::now());
    g_lib_cpu_us += cpu_us;
    ++g_lib[op].calls;
    if (!sandbox_child::mark_library_exit(op)) _exit(3);
    pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  }
  sigset_t saved_mask;
  LibOp op;
  Clock::time_point t0;
  double c0 = 0;
};

at::Tensor view(const float* p, std::initializer_list<int64_t> shape) {
  return at::from_blob(const_cast<float*>(p), shape, at::kFloat);
}

void lib_matmul(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  LibTimer t{kMatmul};
  at::Tensor out = view(c, {m, n});
  at::mm_out(out, view(a, {m, k}), view(b, {k, n}));
}
void lib_softmax_rows(const float* x, float* y, int64_t r, int64_t c) {
  LibTimer t{kSoftmaxRows};
  view(y, {r, c}).copy_(at::softmax(view(x, {r, c}), 1));
}
void lib_sum_rows(const float* x, float* y, int64_t r, int64_t c) {
  LibTimer t{kSumRows};
  at::Tensor out = view(y, {r});
  at::sum_out(out, view(x, {r, c}), {1});
}
void lib_max_rows(const float* x, float* y, int64_t r, int64_t c) {
  LibTimer t{kMaxRows};
  at::Tensor out = view(y, {r});
  at::amax_out(out, view(x, {r, c}), {1});
}
void lib_add_bias_rows(const float* x, const float* b, float* y, int64_t r, int64_t c) {
  LibTimer t{kAddBiasRows};
  at::Tensor out = view(y, {r, c});
  at::add_out(out, view(x, {r, c}), view(b, {c}));
}
void lib_add(const float* a, const float* b, float* y, int64_t n) {
  LibTimer t{kAdd};
  at::Tensor out = view(y, {n});
  at::add_out(out, view(a, {n}), view(b, {n}));
}
void lib_mul(const float* a, const float* b, float* y, int64_t n) {
  LibTimer t{kMul};
  at::Tensor out = view(y, {n});
  at::mul_out(out, view(a, {n}), view(b, {n}));
}
void lib_exp(const float* x, float* y, int64_t n) {
  LibTimer t{kExp};
  at::Tensor out = view(y, {n});
  at::exp_out(out, view(x, {n}));
}
void lib_tanh(const float* x, float* y, int64_t n) {
  LibTimer t{kTanh};
  at::Tensor out = view(y, {n});
  at::tanh_out(out, view(x, {n}));
}
void lib_relu(const float* x, float* y, int64_t n) {
  LibTimer t{kRelu};
  at::Tensor out = view(y, {n});
  at::clamp_min_out(out, view(x, {n}), 0);
}
void lib_sigmoid(const float* x, float* y, int64_t n) {
  LibTimer t{kSigmoid};
  at::Tensor out = view(y, {n});
  at::sigmoid_out(out, view(x, {n}));
}

const turnrl_lib kLib = {TURNRL_CANDIDATE_API_VERSION, lib_matmul, lib_softmax_rows, lib_sum_rows, lib_max_rows,
                         lib_add_bias_rows, lib_add, lib_mul, lib_exp, lib_tanh, lib_relu, lib_sigmoid};

// A routine the task asks the candidate to replace is not served: the slot only counts the call
// and writes nothing (its output stays as it was, NaN-poisoned for outputs), so calling it yields a
// wrong answer whatever the candidate does to the counters afterwards.
int64_t g_refused_calls = 0;
void refused_rows(const float*, float*, int64_t, int64_t) { ++g_refused_calls; }
void refused_matmul(const float*, const float*, float*, int64_t, int64_t, int64_t) { ++g_refused_calls; }
void refused_bias_rows(const float*, const float*, float*, int64_t, int64_t) { ++g_refused_calls; }
void refused_binary(const float*, const float*, float*, int64_t) { ++g_refused_calls; }
void refused_unary(const float*, float*, int64_t) { ++g_refused_calls; }

turnrl_lib library_for(const CpuTask& task) {
  turnrl_lib lib = kLib;
  for (const auto& name : task.replaces) {
    if (name == "matmul") lib.matmul = refused_matmul;
    else if (name == "softmax_rows") lib.softmax_rows = refused_rows;
    else if (name == "sum_rows") lib.sum_rows = refused_rows;
    else if (name == "max_rows") lib.max_rows = refused_rows;
    else if (name == "add_bias_rows") lib.add_bias_rows = refused_bias_rows;
    else if (name == "add") lib.add = refused_binary;
    else if (name == "mul") lib.mul = refused_binary;
    else if (name == "exp") lib.exp = refused_unary;
    else if (name == "tanh") lib.tanh = refused_unary;
    else if (name == "relu") lib.relu = refused_unary;
    else if (name == "sigmoid") lib.sigmoid = refused_unary;
  }
  return lib;
}

double lib_total_us() {
  double s = 0;
  for (const auto& l : g_lib) s += l.us;
  return s;
}
void reset_lib() {
  for (auto& l : g_lib) l = {};
}

// ---- buffers ------------------------------------------------------------------------------------
// An output lives in the middle of a large inaccessible reservation, between guard bands of random
// length filled with a random NaN pattern: a write just past the output changes a guard (flagged,
// checked after every call), a write far past it faults (the call crashes). Neither the guards'
// length nor their pattern can be known before the call.
constexpr size_t kReservedBytes = size_t(16) << 20;  // PROT_NONE on each side (address space only)
constexpr uint32_t kPoisonBits = 0x7fc00000u;

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::mt19937_64& guard_rng() {
  static std::mt19937_64 rng{std::random_device{}()};
  return rng;
}

class Output {
 public:
  Output(const Shape& s) : shape(s), n(numel(s)) {
    auto& rng = guard_rng();
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t low = 256 + rng() % 3840, high_min = 256 + rng() % 3840;  // floats
    pattern_ = 0x7f800000u | 0x00400000u | uint32_t(rng() & 0x3fffffu);     // a quiet NaN, random payload
    usable_ = ((low + size_t(n) + high_min) * 4 + page - 1) / page * page;
    map_bytes_ = usable_ + 2 * kReservedBytes;
    void* m = mmap(nullptr, map_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    map_ = static_cast<char*>(m);
    if (mprotect(map_ + kReservedBytes, usable_, PROT_READ | PROT_WRITE) != 0) {
      munmap(map_, map_bytes_);
      throw std::bad_alloc();
    }
    region_ = reinterpret_cast<float*>(map_ + kReservedBytes);
    data_ = region_ + low;
    std::fill(region_, region_ + usable_ / 4, from_bits(pattern_));
  }
  ~Output() {
    if (map_) munmap(map_, map_bytes_);
  }
  Output(Output&& o) noexcept
      : shape(std::move(o.shape)), n(o.n), map_(o.map_), map_bytes_(o.map_bytes_), usable_(o.usable_),
        region_(o.region_), data_(o.data_), pattern_(o.pattern_) {
    o.map_ = nullptr;
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  float* data() const { return data_; }
  void poison() { std::fill(data_, data_ + n, from_bits(kPoisonBits)); }
  bool guards_intact() const {
    const uint32_t p = pattern_;
    auto intact = [p](const float* a, const float* b) {
      return std::all_of(a, b, [p](float f) { return bits_of(f) == p; });
    };
    return intact(region_, data_) && intact(data_ + n, region_ + usable_ / 4);
  }

  Shape shape;
  int64_t n = 0;

 private:
  char* map_ = nullptr;
  size_t map_bytes_ = 0, usable_ = 0;
  float* region_ = nullptr;
  float* data_ = nullptr;
  uint32_t pattern_ = 0;
};

struct Inputs {
  std::vector<std::vector<float>> data;
  ShapeSet shapes;
  std::vector<float*> ptrs() {
    std::vector<float*> p;
    for (auto& d : data) p.push_back(d.data());
    return p;
  }
  std::vector<int64_t> sizes() const {
    std::vector<int64_t> s;
    for (const auto& d : data) s.push_back(int64_t(d.size()));
    return s;
  }
};

Inputs make_host_inputs(const CpuTask& task, const ShapeSet& shapes, uint64_t seed) {
  Inputs in;
  in.shapes = shapes;
  for (size_t i = 0; i < in.shapes.size(); ++i) {
    in.data.emplace_back(size_t(numel(in.shapes[i])));
    fill_input(task.inputs[i], in.data.back().data(), int64_t(in.data.back().size()), seed, int(i));
  }
  return in;
}

turnrl_tensor describe(float* data, const Shape& shape) {
  turnrl_tensor t{};
  t.data = data;
  t.ndim = int(shape.size());
  for (size_t d = 0; d < shape.size() && d < TURNRL_MAX_DIMS; ++d) t.shape[d] = shape[d];
  t.numel = numel(shape);
  return t;
}

int count_threads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

void flush_lines(const float* p, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t off = 0; off < n * 4; off += 64) _mm_clflush(c + off);
  _mm_mfence();
#else
  (void)p, (void)n;  // elsewhere the timed data may stay cached (documented)
#endif
}

// Timed in 1 MiB chunks over a 64 MiB buffer and the fastest chunk kept: a whole-buffer copy timed
// on a loaded machine can come out several times slower than the memory really is, and a low
// estimate turns honest fast kernels into implausible_speed verdicts.
double measure_bandwidth() {
  const size_t chunk = size_t(1) << 20, n = size_t(64) << 20;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 1e30;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t off = 0; off < n; off += chunk) {
      auto t0 = Clock::now();
      std::memcpy(b.data() + off, a.data() + off, chunk);
      best = std::min(best, micros(t0, Clock::now()));
    }
  }
  return 2.0 * double(chunk) / (std::max(best, 1e-3) * 1e-6);
}

// What a checked or timed call runs: the candidate's entry point, or in the clean worker the
// task's reference. A kernel that times itself (the reference, whose outputs are copied out after
// its timer stops) sets *self_timed.
// Keeps freed blocks by size and hands them out again; never returns memory to the system.
// Single-threaded use (the worker runs LibTorch with one thread); the lock is for safety only.
// LibTorch 1.13 declares Allocator::allocate const; 2.x does not.
#if TORCH_VERSION_MAJOR < 2
#define TURNRL_ALLOCATE_QUALIFIER const
#else
#define TURNRL_ALLOCATE_QUALIFIER
#endif
class ReusingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) TURNRL_ALLOCATE_QUALIFIER override {
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu());
      auto& list = free_blocks()[n];
      if (!list.empty()) p = list.back(), list.pop_back();
    }
    if (!p) {
      p = std::aligned_alloc(64, std::max<size_t>(64, (n + 63) / 64 * 64));
      if (!p) throw std::bad_alloc();
      std::lock_guard<std::mutex> lock(mu());
      sizes()[p] = n;
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  // LibTorch 2.x's Allocator asks for this; 1.13's has no such member.
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

 private:
  static void release(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu());
    free_blocks()[sizes().at(p)].push_back(p);
  }
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::map<size_t, std::vector<void*>>& free_blocks() {
    static std::map<size_t, std::vector<void*>> m;
    return m;
  }
  static std::map<void*, size_t>& sizes() {
    static std::map<void*, size_t> m;
    return m;
  }
};

struct CallTimes {
  double wall_us = -1, cpu_us = -1;
};
struct Kernel {
  std::function<int(turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, CallTimes* self_timed)> run;
  // Only the reference (in the clean worker, where no candidate code is loaded) times itself, to
  // leave its copy into the outputs out. A candidate's call is timed around it: a time it wrote
  // into memory it can reach (the stack) is never read (a stack walk forged 118x that way).
  bool self_timed = false;
};

// One call with every observation the hacking checks need. Outputs are poisoned before the call,
// the inputs' bytes and the guard bands checked after it, whichever phase the call belongs to.
CallReport observed_call(const Kernel& kernel, Inputs& in, std::vector<Output>& outs, bool flush_caches,
                         bool mark = false) {
  CallReport rep;
  const std::vector<std::vector<float>> saved = in.data;
  std::vector<turnrl_tensor> tin, tout;
  for (size_t i = 0; i < in.data.size(); ++i) tin.push_back(describe(in.data[i].data(), in.shapes[i]));
  for (auto& o : outs) {
    o.poison();
    tout.push_back(describe(o.data(), o.shape));
  }
  if (flush_caches) {
    for (auto& d : in.data) flush_lines(d.data(), int64_t(d.size()));
    for (auto& o : outs) flush_lines(o.data(), o.n);
  }
  const int threads_before = count_threads();
  const double lib_before = lib_total_us(), lib_cpu_before = g_lib_cpu_us;
  const int64_t refused_before = g_refused_calls;
  CallTimes self;
  if (mark && !sandbox_child::mark_call()) _exit(3);  // the parent is gone
  const double c0 = thread_cpu_us();
  const auto t0 = Clock::now();
  rep.rc = kernel.run(tin.data(), int(tin.size()), tout.data(), int(tout.size()), &self);
  const auto t1 = Clock::now();
  const double c1 = thread_cpu_us();
  if (mark && !sandbox_child::mark_call()) _exit(3);
  // Before anything allocates or calls into a library: a slot left pointing at the candidate's code
  // would run it here, after the closing mark (work deferred out of the timed call).
  rep.rewrote_got = sandbox_child::library_gots_rewritten();
  for (auto& o : outs) rep.outputs.emplace_back(o.data(), o.data() + o.n);
  rep.call_us = kernel.self_timed && self.wall_us >= 0 ? self.wall_us : micros(t0, t1);
  rep.call_cpu_us = kernel.self_timed && self.cpu_us >= 0 ? self.cpu_us : c1 - c0;
  rep.lib_us = lib_total_us() - lib_before;
  rep.lib_cpu_us = g_lib_cpu_us - lib_cpu_before;
  rep.called_replaced = g_refused_calls != refused_before;
  rep.left_threads = count_threads() > threads_before;
  if (rep.left_threads) {
    // Give work running on the other thread time to land, then see whether outputs changed.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (size_t k = 0; k < outs.size(); ++k)
      if (std::memcmp(outs[k].data(), rep.outputs[k].data(), size_t(outs[k].n) * 4) != 0) rep.changed_after_return = 1;
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    float* p = tout[k].data;
    if (p != outs[k].data()) {
      bool alias = false;
      for (auto& d : in.data) alias |= p >= d.data() && p < d.data() + d.size();
      (alias ? rep.aliases_input : rep.repointed) = 1;
    }
    if (!outs[k].guards_intact()) rep.out_of_bounds = 1;
  }
  for (size_t i = 0; i < saved.size(); ++i)
    if (std::memcmp(saved[i].data(), in.data[i].data(), saved[i].size() * 4) != 0) rep.mutated_inputs = 1;
  return rep;
}

std::vector<Output> make_outputs(const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<Output> outs;
  for (const auto& s : shapes) outs.emplace_back(s);
  return outs;
}

Kernel candidate_kernel(turnrl_kernel_fn fn, const turnrl_lib* lib) {
  auto run = [fn, lib](turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, CallTimes*) {
    return fn(in, n_in, out, n_out, lib);
  };
  return {run, /*self_timed=*/false};
}

// The reference on the buffers of `in` (the clean worker), timed without the copy into outputs.
Kernel reference_kernel(const CpuTask& task) {
  auto run = [&task](turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, CallTimes* self) {
    std::vector<at::Tensor> views;
    for (int i = 0; i < n_in; ++i)
      views.push_back(at::from_blob(in[i].data, at::IntArrayRef(in[i].shape, size_t(in[i].ndim)), at::kFloat));
    const double c0 = thread_cpu_us();
    const auto t0 = Clock::now();
    const std::vector<at::Tensor> r = task.reference(views);
    self->wall_us = micros(t0, Clock::now());
    self->cpu_us = thread_cpu_us() - c0;
    for (int k = 0; k < n_out && size_t(k) < r.size(); ++k)
      at::from_blob(out[k].data, {out[k].numel}, at::kFloat).copy_(r[size_t(k)].reshape(-1));
    return 0;
  };
  return {run, /*self_timed=*/true};
}

void run_correctness(const WorkerRequest& req, const CpuTask& task, const Kernel& kernel, WorkerReply& reply) {
  std::unique_ptr<Inputs> current, original;
  for (size_t t = 0; t < req.trials.size(); ++t) {
    const TrialPlan& plan = req.trials[t];
    if (plan.reuse && current) {
      // Same addresses, new contents: restore the previous trial's inputs, rewrite second halves.
      for (size_t i = 0; i < current->data.size(); ++i) current->data[i] = original->data[i];
      auto ptrs = current->ptrs();
      auto sizes = current->sizes();
      rewrite_tail(task, ptrs.data(), sizes.data(), plan.tail_seed);
    } else {
      // New buffers are allocated while the old ones are alive, so their addresses differ.
      auto fresh = std::make_unique<Inputs>(make_host_inputs(task, plan.input_shapes, plan.seed));
      original = std::make_unique<Inputs>(*fresh);
      current = std::move(fresh);
    }
    std::vector<Output> outs = make_outputs(plan.output_shapes);
    reply.trials.push_back(observed_call(kernel, *current, outs, false));
    if (reply.trials.back().rc != 0) {
      reply.status = WorkerStatus::runtime_error;
      reply.failed_trial = int32_t(t);
      reply.message = fmt::format("turnrl_kernel returned {}", reply.trials.back().rc);
      return;
    }
  }
}

// A fresh worker's requests page-fault in everything the harness allocates (inputs, every timed
// call's kept outputs, the reply), and where a page fault is dear (about 20 us on a paravirtualised
// VM seen on 2026-12-07, against about 1 us on bare metal) that is a hundred milliseconds of CPU
// billed to a timing request, which the reported-time check (check_billed_time) measures against
// the clean worker's harness cost: honest candidates were flagged, both ways (a fresh candidate
// worker billed 116 ms against a warm clean one's 16; a clean worker whose glibc heap mapped and
// unmapped its inputs on every request needed 41 ms against a warm candidate's 14; a candidate's
// 25 kept outputs of 512 KiB and their reply outgrew a 32 MiB reserve: 2,100 faults, 116 ms).
// So every worker's heap never maps blocks of its own and never gives memory back, it starts with
// a warm reserve (faulted in before any request is billed), and a candidate's correctness request,
// whose CPU time no check reads, faults in what the timing request after it holds at its peak
// (WorkerRequest::warm_heap_bytes; the clean worker gets it on a ping before its bill starts). Both
// harnesses then run on warm heaps, and the reference's own output allocations come from one too,
// as PyTorch's caching allocator gives on GPUs. Asked for more than 1 TiB, it warms 1 TiB.
void keep_heap_warm(uint64_t asked) {
  const size_t bytes = size_t(std::min<uint64_t>(asked, uint64_t(1) << 40));
  static size_t warm = 0;
  if (warm == 0) {
    mallopt(M_MMAP_MAX, 0);  // every block from the heap, which keeps what it is given back
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  }
  if (bytes <= warm) return;
  constexpr size_t kBlock = size_t(8) << 20;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  std::vector<void*> blocks;
  size_t got = 0;
  for (; got < bytes; got += kBlock) {
    void* p = std::malloc(kBlock);
    if (!p) break;  // under the worker's memory limit: warm what fits
    // One call per block where the kernel has it (Linux >= 5.14), else a page fault per page.
    const uintptr_t from = (uintptr_t(p) + page - 1) & ~(page - 1), to = (uintptr_t(p) + kBlock) & ~(page - 1);
    constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE
    if (to <= from || madvise(reinterpret_cast<void*>(from), to - from, kPopulateWrite) != 0) std::memset(p, 0, kBlock);
    blocks.push_back(p);
  }
  for (void* p : blocks) std::free(p);
  warm = std::max(warm, got);
}

// Warm-up calls, then timing_trials calls on inputs perturbed before each; every call is observed
// the same way (poisoned outputs, guards, input bytes), and every timed call's outputs go back to
// the parent, which checks a subset of its own choosing.
void run_timing(const WorkerRequest& req, const CpuTask& task, const Kernel& kernel, bool keep_outputs,
                WorkerReply& reply) {
  Inputs in = make_host_inputs(task, task.shape_sets.at(0), req.timing_seed);
  const std::vector<std::vector<float>> base = in.data;  // each timed call's inputs are drawn from it
  std::vector<const float*> base_ptrs;
  for (const auto& b : base) base_ptrs.push_back(b.data());
  std::vector<Output> outs = make_outputs(req.timing_output_shapes);
  auto ptrs = in.ptrs();
  auto sizes = in.sizes();
  if (!keep_outputs)  // the size the parent expects (malformed_reply), from the same shapes
    reply.mirrored_outputs.reserve(size_t(total_numel(req.timing_output_shapes)) *
                                   size_t(std::max(0, req.timing_trials)));
  for (int w = 0; w < req.warmup; ++w) {
    CallReport rep = observed_call(kernel, in, outs, req.flush_caches);
    rep.outputs.clear();
    reply.warmups.push_back(rep);
    if (rep.rc != 0) {
      reply.status = WorkerStatus::runtime_error;
      reply.message = fmt::format("turnrl_kernel returned {} during warm-up", rep.rc);
      return;
    }
  }
  reset_lib();
  for (int i = 0; i < req.timing_trials; ++i) {
    perturb_for_timing(base_ptrs.data(), ptrs.data(), sizes.data(), int(ptrs.size()), req.timing_seed, i);
    reply.timed.push_back(observed_call(kernel, in, outs, req.flush_caches, req.mark_calls != 0));
    // Nobody checks the reference's outputs, but they are copied out as a candidate's are
    // (WorkerReply::mirrored_outputs) and freed at once: its next allocations reuse the same memory
    // instead of growing the heap on every call (kept, they made the reference tenfold slower).
    if (!keep_outputs) {
      for (const auto& o : reply.timed.back().outputs)
        reply.mirrored_outputs.insert(reply.mirrored_outputs.end(), o.begin(), o.end());
      std::vector<std::vector<float>>().swap(reply.timed.back().outputs);
    }
    if (reply.timed.back().rc != 0) {
      reply.status = WorkerStatus::runtime_error;
      reply.message = fmt::format("turnrl_kernel returned {} during timing", reply.timed.back().rc);
      return;
    }
  }
  for (int op = 0; op < kNumOps; ++op)
    if (g_lib[op].calls > 0) reply.lib_names.push_back(kLibraryRoutines[op]), reply.lib_stats.push_back(g_lib[op]);
}

void handle(const WorkerRequest& req, WorkerReply& reply) {
  if (!has_cpu_task(req.task)) {
    reply.status = WorkerStatus::bad_request;
    reply.message = "unknown task " + req.task;
    return;
  }
  const CpuTask& task = cpu_task(req.task);
  if (req.library.empty()) {  // the clean worker: the reference, never a candidate
    if (req.kind != RequestKind::timing) {
      reply.status = WorkerStatus::bad_request;
      reply.message = "only timing requests may omit the candidate";
      return;
    }
    // The reference allocates its outputs on every call, from the warm heap (keep_heap_warm), and
    // the reported reference time keeps that allocator's cost; the laziness yardstick asks for the
    // operators' time alone, through a reusing allocator (as PyTorch's caching allocator gives on
    // GPUs). This worker never loads a candidate.
    static ReusingCpuAllocator reusing;
    c10::Allocator* const original = c10::GetCPUAllocator();
    if (req.reusing_allocator) c10::SetCPUAllocator(&reusing, /*priority=*/1);
    run_timing(req, task, reference_kernel(task), false, reply);
    if (req.reusing_allocator) c10::SetCPUAllocator(original, /*priority=*/1);
    return;
  }
  std::string why;
  void* handle = sandbox_child::load_shared_object(req.library, why);
  if (!handle) {
    reply.status = WorkerStatus::load_failed;
    reply.message = why;
    return;
  }
  auto fn = reinterpret_cast<turnrl_kernel_fn>(dlsym(handle, TURNRL_KERNEL_SYMBOL));
  if (!fn) {
    reply.status = WorkerStatus::load_failed;
    reply.message = fmt::format("no extern \"C\" symbol {} in the candidate", TURNRL_KERNEL_SYMBOL);
    dlclose(handle);
    return;
  }
  const turnrl_lib lib = library_for(task);
  const Kernel kernel = candidate_kernel(fn, &lib);
  try {
    if (req.kind == RequestKind::timing) {
      run_timing(req, task, kernel, true, reply);
    } else {
      keep_heap_warm(req.warm_heap_bytes);
      run_correctness(req, task, kernel, reply);
    }
  } catch (const std::bad_alloc&) {
    sandbox_child::report_out_of_memory();
  } catch (const std::exception& e) {
    reply.status = WorkerStatus::runtime_error;
    reply.message = std::string("exception: ") + e.what();
  }
  dlclose(handle);
}

// Process-wide state a candidate could change to affect what runs after it (signal dispositions
// and mask, interval timers, resource limits but the CPU one the harness re-arms, umask, nice
// value, CPU affinity, thread count), one named item each.
std::vector<std::pair<std::string, std::string>> process_state() {
  std::vector<std::pair<std::string, std::string>> items;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa {};
    if (sigaction(sig, nullptr, &sa) != 0) continue;
    items.emplace_back(fmt::format("signal {} disposition", sig),
                       fmt::format("{}/{:x}", reinterpret_cast<const void*>(sa.sa_handler), unsigned(sa.sa_flags)));
  }
  sigset_t blocked;
  sigprocmask(SIG_BLOCK, nullptr, &blocked);
  std::string mask;
  for (int sig = 1; sig < NSIG; ++sig) mask += sigismember(&blocked, sig) == 1 ? '1' : '0';
  items.emplace_back("blocked signals", mask);
  for (int which : {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF}) {
    itimerval v{};
    getitimer(which, &v);
    items.emplace_back(fmt::format("interval timer {}", which),
                       fmt::format("{}.{}/{}.{}", v.it_value.tv_sec, v.it_value.tv_usec, v.it_interval.tv_sec,
                                   v.it_interval.tv_usec));
  }
  for (int res = 0; res < RLIM_NLIMITS; ++res) {
    if (res == RLIMIT_CPU) continue;
    rlimit l{};
    getrlimit(__rlimit_resource(res), &l);
    items.emplace_back(fmt::format("resource limit {}", res), fmt::format("{}/{}", l.rlim_cur, l.rlim_max));
  }
  const mode_t mask_now = umask(0077);
  umask(mask_now);
  items.emplace_back("umask", std::to_string(mask_now));
  items.emplace_back("nice", std::to_string(getpriority(PRIO_PROCESS, 0)));
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  sched_getaffinity(0, sizeof cpus, &cpus);
  items.emplace_back("cpu affinity", std::to_string(CPU_COUNT(&cpus)));
  items.emplace_back("threads", std::to_string(count_threads()));
  // Not dumpable, the worker's memory may be closed to a parent without privileges, which reads the
  // candidate's sampled code to compare it with the object (SandboxWorker::expect_loaded_code).
  items.emplace_back("dumpable", std::to_string(prctl(PR_GET_DUMPABLE)));
  // The floating-point environment: flush-to-zero / denormals-are-zero or another rounding mode
  // left on changes what later calls compute and how fast (denormal arithmetic is slow).
  items.emplace_back("rounding mode", std::to_string(fegetround()));
#if defined(__x86_64__)
  constexpr unsigned kMxcsrExceptionFlags = 0x3f;  // sticky status bits every computation may set
  items.emplace_back("SSE control (MXCSR)", fmt::format("{:x}", _mm_getcsr() & ~kMxcsrExceptionFlags));
  unsigned short x87_control = 0;
  __asm__ volatile("fnstcw %0" : "=m"(x87_control));
  items.emplace_back("x87 control word", fmt::format("{:x}", x87_control));
#endif
  return items;
}

std::string state_change(const std::vector<std::pair<std::string, std::string>>& before,
                         const std::vector<std::pair<std::string, std::string>>& now) {
  std::string changed;
  for (size_t i = 0; i < before.size() && i < now.size(); ++i)
    if (before[i] != now[i]) changed += fmt::format("{}{} ({} -> {})", changed.empty() ? "" : ", ", before[i].first,
                                                    before[i].second, now[i].second);
  return changed;
}

}  // namespace

int cpu_worker_main(int, char**) {
  sandbox_child::install_crash_reporter();
  at::set_num_threads(1);
  at::set_num_interop_threads(1);
  // glibc's vector math library, loaded now with the C runtime it belongs to: what GCC calls for a
  // vectorised expf (-ffast-math) is then the runtime's code loaded at start-up, as libm's is, not
  // a library mapped later (library_samples.h); absent on some machines, which is fine.
  dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL);
  // Touch the reference path once so that its one-time set-up is not billed to the first call.
  at::softmax(at::ones({2, 2}), 1);
  const double bandwidth = measure_bandwidth();  // its 128 MiB go back to the system before the heap is kept
  keep_heap_warm(uint64_t(32) << 20);
  // The candidate profile first: the state every request is compared with is the confined one.
  sandbox_child::confine_candidate();
  const auto state_at_start = process_state();
  sandbox_child::say_hello();
  std::string request;
  while (sandbox_child::read_request(request)) {
    WorkerReply reply;
    try {
      const WorkerRequest req = decode<WorkerRequest>(request);
      reply.nonce = req.nonce;
      if (req.kind == RequestKind::ping) {
        keep_heap_warm(req.warm_heap_bytes);
      } else {
        sandbox_child::arm_cpu_limit();
        reply.bandwidth_bytes_per_s = bandwidth;
        handle(req, reply);
        reply.state_change = state_change(state_at_start, process_state());
      }
    } catch (const std::exception& e) {
      reply.status = WorkerStatus::bad_request;
      reply.message = e.what();
    }
    sandbox_child::write_reply(encode(reply));
  }
  return 0;
}

}  // namespace turnrl::cpu_detail
