#pragma once
// Where one thread of another process spends its CPU time, sampled from outside it (internal to
// src/kernels). A perf_event_open task-clock event on the thread (user-space instruction pointers
// only, one sample every `period_ns` of the thread's CPU time) writes its samples into a ring
// buffer that only the sampling process maps, so nothing the sampled process runs can rewrite,
// drop or add one. Sampling a process needs the right to ptrace it (perf_event_paranoid <= 2
// allows user-space sampling then); containers without perf_event_open have none:
// code_sampling_unavailable() says why, and callers run without it.
//
// Knows nothing of what the code is: the caller names a mapping's owner (the kernel evaluator:
// library_samples.h).
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace turnrl::sandbox_detail {

// "" when this process may sample threads (probed once, on a thread of its own), else why not
// (e.g. "perf_event_open: EACCES").
const std::string& code_sampling_unavailable();

// One sample: the user-space instruction pointer, and when it was taken (CLOCK_MONOTONIC, ns).
struct CodeSample {
  uint64_t ip = 0;
  uint64_t time_ns = 0;
};

// One sampling event on one thread, opened disabled. Not copyable; closes the event with it.
class ThreadSampler {
 public:
  // tid: the thread (a process's main thread has tid == pid); period_ns: the thread's CPU time
  // between two samples; ring_pages_log2: the ring holds 2^k pages of 24-byte samples (k = 7:
  // 21845 samples, 21 s of CPU at 1 ms), drained by drain().
  ThreadSampler(pid_t tid, int64_t period_ns, int ring_pages_log2 = 7);
  ~ThreadSampler();
  ThreadSampler(const ThreadSampler&) = delete;
  ThreadSampler& operator=(const ThreadSampler&) = delete;

  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }  // why it could not be opened
  bool enable();
  bool disable();
  // Another CPU time between two samples from the next sample on (call it while disabled); false
  // when the kernel refuses it. Its timer fires at most every 10 us of CPU.
  bool set_period(int64_t period_ns);
  // Appends the samples taken since the last drain; returns how many samples the kernel dropped
  // since then because the ring was full.
  int64_t drain(std::vector<CodeSample>& samples);

 private:
  int fd_ = -1;
  void* ring_ = nullptr;
  size_t ring_bytes_ = 0;  // the header page plus the data pages
  std::string error_;
};

// An executable mapping of a process, as /proc/<pid>/maps lists it.
struct CodeMapping {
  uint64_t start = 0, end = 0;  // [start, end)
  uint64_t offset = 0;          // where in its file the mapping starts
  std::string name;             // the path ("... (deleted)" once removed), "[vdso]", or "[anon]"
};
// The executable mappings in the text of a maps file, in address order.
std::vector<CodeMapping> parse_code_mappings(const std::string& maps);
// Those of process `pid` (empty when its maps cannot be read).
std::vector<CodeMapping> read_code_mappings(pid_t pid);
// The mapping that holds `ip` in mappings sorted by address, or null.
const CodeMapping* mapping_at(const std::vector<CodeMapping>& mappings, uint64_t ip);

// Whether mapping `m` of process `pid` holds exactly the bytes of `file` from m.offset (and zeros
// past its end, as the kernel fills a file's last page): read with process_vm_readv, which needs
// the same right to the process as sampling it. Nullopt when the memory cannot be read.
std::optional<bool> mapping_holds_file(pid_t pid, const CodeMapping& m, std::string_view file);

}  // namespace turnrl::sandbox_detail
