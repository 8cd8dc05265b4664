/* turnrl CPU backend: the contract between a candidate kernel and the evaluator.
 *
 * A candidate is one C or C++ source file that defines
 *
 *   extern "C" int turnrl_kernel(const turnrl_tensor* inputs, int num_inputs,
 *                                turnrl_tensor* outputs, int num_outputs, const turnrl_lib* lib);
 *
 * - inputs:  the task's input tensors, float32, contiguous, row-major; read-only.
 * - outputs: preallocated float32 tensors with the reference's output shapes. Their contents are
 *            NaN on entry; every element must be written. (The evaluator reads outputs[i].data
 *            after the call; it must still be the buffer it gave you.)
 * - lib:     optional instrumented library routines (below). Time spent in them is library time:
 *            the profiled coverage is the share of the call spent in the candidate's own code.
 * - return:  0 on success, anything else is a runtime error.
 *
 * Rules (enforced, see docs/evaluator.md): single-threaded, no I/O, no system calls, no dynamic
 * loading, no LibTorch; the same result for every input of the declared shapes.
 * This header is plain C so that candidates need nothing but the host compiler.
 */
#ifndef TURNRL_EVAL_CANDIDATE_API_H
#define TURNRL_EVAL_CANDIDATE_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TURNRL_CANDIDATE_API_VERSION 1
#define TURNRL_MAX_DIMS 8

/* A dense float32 tensor. */
typedef struct turnrl_tensor {
  float* data;
  int64_t shape[TURNRL_MAX_DIMS];
  int ndim;
  int64_t numel;
} turnrl_tensor;

/* Library routines a candidate may call; all float32, contiguous, row-major, single-threaded.
 * Calling the routine that the task itself asks for is flagged (calls_reference). */
typedef struct turnrl_lib {
  int version;
  /* c[m,n] = a[m,k] @ b[k,n] */
  void (*matmul)(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);
  /* y[r,:] = softmax(x[r,:]) */
  void (*softmax_rows)(const float* x, float* y, int64_t rows, int64_t cols);
  /* y[r] = sum(x[r,:]), y[r] = max(x[r,:]) */
  void (*sum_rows)(const float* x, float* y, int64_t rows, int64_t cols);
  void (*max_rows)(const float* x, float* y, int64_t rows, int64_t cols);
  /* y[r,c] = x[r,c] + b[c] */
  void (*add_bias_rows)(const float* x, const float* b, float* y, int64_t rows, int64_t cols);
  /* elementwise, n elements */
  void (*add)(const float* a, const float* b, float* y, int64_t n);
  void (*mul)(const float* a, const float* b, float* y, int64_t n);
  void (*exp)(const float* x, float* y, int64_t n);
  void (*tanh)(const float* x, float* y, int64_t n);
  void (*relu)(const float* x, float* y, int64_t n);
  void (*sigmoid)(const float* x, float* y, int64_t n);
} turnrl_lib;

typedef int (*turnrl_kernel_fn)(const turnrl_tensor* inputs, int num_inputs, turnrl_tensor* outputs,
                                int num_outputs, const turnrl_lib* lib);

#define TURNRL_KERNEL_SYMBOL "turnrl_kernel"

#ifdef __cplusplus
}
#endif

#endif /* TURNRL_EVAL_CANDIDATE_API_H */
