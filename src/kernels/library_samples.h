#pragma once
// The CPU evaluator's reading of where a candidate's worker thread ran during its timed calls, as
// sampled from outside the worker (SandboxReply::code_samples; internal to src/kernels): whose code
// each sampled mapping is, and how much library time ran outside the routines the worker serves.
// The worker's served routines mark their calls (SandboxReply::library_uses); a candidate that
// finds a library's code itself (a loaded library's own symbol table: sgemm_ in the BLAS behind
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
  library,    // everything else: LibTorch, BLAS, LAPACK, OpenMP, any other library, anonymous executable
              // memory, code mapped after start-up under another name, an address in no mapping
};
// worker_program: the worker executable's path (its file name is what counts).
CodeOwner code_owner(const CodeSamples& s, const std::string& worker_program);

// The samples of the timed calls by owner, and the library's sampled CPU time.
struct SampledCode {
  int64_t candidate = 0, harness = 0, library = 0;  // samples
  double library_us = 0;                            // library samples x period
  std::string library_mappings;                     // the library mappings sampled, most samples first
};
SampledCode classify_samples(const std::vector<CodeSamples>& samples, double period_seconds,
                             const std::string& worker_program);

// Library CPU time (us, over the timed calls) that the served routines' marks do not account for:
// max(0, sampled − marked − slack). Sampling quantises (one sample stands for a whole period, and
// each library interval gains or loses up to one), and the marked time includes the routines'
// wrappers and kernel time that user-space samples never see, so an honest candidate's sampled
// library time is at most its marked time give or take a few periods; the slack is 4 periods, half
// a period per timed call and a tenth of the marked time, over the calls together.
double hidden_library_us(double sampled_library_us, double marked_library_us, size_t timed_calls, double period_us);

}  // namespace turnrl::eval_detail
