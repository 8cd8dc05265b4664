#pragma once
// The CPU evaluator's reading of where a candidate's worker thread ran during its timed calls, as
// sampled from outside the worker (SandboxReply::code_samples; internal to src/kernels): whose code
// each sampled mapping is, and how much library time ran outside the routines the worker serves.
// The worker's served routines mark their calls (SandboxReply::library_uses, with the monotonic
// clock that samples carry too); a candidate that finds a library's code itself (a loaded library's own symbol table: sgemm_ in the BLAS behind
// LibTorch) marks nothing, but the samples still land in that library's mapping.
#include <cstdint>
#include <string>
#include <vector>

#include "turnrl/kernels/sandbox.h"

namespace turnrl::eval_detail {

enum class CodeOwner {
  candidate,  // the candidate's object, and the C/C++ runtime it may call (libc, libm, libstdc++, libgcc_s,
              // the dynamic loader, the vDSO) as the worker loaded it at start-up
  harness,    // the worker executable (its loop, marks, served routines' wrappers): neither side's work
  served_routine,  // taken inside a served routine's marked call (kInsideServedRoutine): its marks count it
  library,    // everything else: LibTorch, BLAS, LAPACK, OpenMP, any other library, anonymous executable
              // memory, code mapped after start-up under another name, an address in no mapping
};
// worker_program: the worker executable's path (its file name is what counts).
CodeOwner code_owner(const CodeSamples& s, const std::string& worker_program);

// The samples of the timed calls by owner, and the library's sampled CPU time.
struct SampledCode {
  int64_t candidate = 0, harness = 0, served_routine = 0, library = 0;  // samples
  double library_us = 0;  // library samples (outside the served routines' calls) x period
  std::string library_mappings;                     // the library mappings sampled, most samples first
};
SampledCode classify_samples(const std::vector<CodeSamples>& samples, double period_seconds,
                             const std::string& worker_program);

// Library CPU time (us, over the timed calls) outside the served routines' calls: the library
// samples times the period, once there are more than two of them. A served routine's call is
// bounded by its marks' monotonic times and the samples inside it are the routine's (its marks
// count that time), so an honest candidate's thread has no library sample at all: it runs its own
// code, the C runtime, the harness, or a served routine. Two are tolerated for what a clock read
// at a mark's edge may leave out; the first library sample costs no reward, the third counts all.
double hidden_library_us(int64_t library_samples, double period_us);

// Library samples outside the served routines' calls in a set of calls sampled at one period.
struct LibrarySamples {
  int64_t samples = 0;
  double period_us = 0;
  size_t calls = 0;
};
// The same over the timed calls, with the densely sampled calls' help (CpuEvalOptions::
// dense_sample_period_us): the timed calls' own where they hold more than two samples, else the
// dense calls' per call times the number of timed calls. A hidden call that leaves the timed calls
// at most two samples at 1 ms (under 3 ms over them all) leaves the dense calls 20 times as many per
// microsecond at 50 us.
double hidden_library_us(const LibrarySamples& timed, const LibrarySamples& dense);

// The served routines' CPU time (us, over the timed calls) as the samples inside their calls allow.
// Samples come one per period of the thread's CPU time, at a phase no call chooses, so calls of
// `marked_us` CPU in all hold about marked_us / period of them, with a binomial spread (each call
// holds a sample with the odds of its share of a period). More than that by over 2 + 3 standard
// deviations means CPU time ran inside the calls that their marks do not count (a forged pair of
// marks around a hidden call holds one sample per period of it, however it is split), and the
// samples' time counts; otherwise the marks' time, which one sample in a short call would
// overstate (a 100 us routine call holds a 1 ms sample one time in ten).
double served_routine_us(double marked_us, int64_t samples_inside, double period_us);

}  // namespace turnrl::eval_detail
