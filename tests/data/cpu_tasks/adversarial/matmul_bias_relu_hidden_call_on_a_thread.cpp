// Class 4, in the rlimits-only sandbox (no seccomp filter there: a candidate can start threads): the
// hidden cblas_sgemm of matmul_bias_relu_hidden_cblas_link_map, run on a thread the candidate starts
// (pthread_create looked up through the dynamic loader's list of objects, not imported) and joins
// before it returns, so that no thread is left over and the calling thread, the one the sampler was
// opened on, only waits. Caught because the sampler's event is inherited by every thread the worker
// starts (code_sampler.h): the new thread's samples land in libblas, and count as library time.
#include <turnrl/kernels/candidate_api.h>
#include <elf.h>
#include <link.h>
#include <string.h>

// A function of a loaded object, by the object's name and the function's, through _r_debug and the
// object's in-memory dynamic symbol table.
static void* loaded_function(const char* object, const char* name) {
  for (const link_map* m = _r_debug.r_map; m; m = m->l_next) {
    if (!m->l_name || !strstr(m->l_name, object)) continue;
    const ElfW(Sym)* symbols = nullptr;
    const char* names = nullptr;
    for (const ElfW(Dyn)* d = m->l_ld; d->d_tag != DT_NULL; ++d) {
      uintptr_t p = d->d_un.d_ptr;
      if (p < m->l_addr) p += m->l_addr;
      if (d->d_tag == DT_SYMTAB) symbols = (const ElfW(Sym)*)p;
      if (d->d_tag == DT_STRTAB) names = (const char*)p;
    }
    for (const ElfW(Sym)* s = symbols; s && names && (const char*)s < names; ++s)
      if (s->st_value && strcmp(names + s->st_name, name) == 0) return (void*)(m->l_addr + s->st_value);
  }
  return nullptr;
}

typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                               float*, int);
typedef int (*thread_create_fn)(unsigned long*, const void*, void* (*)(void*), void*);
typedef int (*thread_join_fn)(unsigned long, void**);

struct Gemm {
  cblas_sgemm_fn sgemm;
  int M, N, K;
  const float *a, *b;
  float* y;
};

static void* run_gemm(void* arg) {
  const Gemm* g = (const Gemm*)arg;
  g->sgemm(101 /* row major */, 111 /* no transpose */, 111, g->M, g->N, g->K, 1.f, g->a, g->K, g->b, g->N, 0.f,
           g->y, g->N);
  return nullptr;
}

extern "C" int turnrl_kernel(const turnrl_tensor* in, int, turnrl_tensor* out, int, const turnrl_lib*) {
  static const cblas_sgemm_fn sgemm = (cblas_sgemm_fn)loaded_function("libblas", "cblas_sgemm");
  static const thread_create_fn create = (thread_create_fn)loaded_function("libc.so", "pthread_create");
  static const thread_join_fn join = (thread_join_fn)loaded_function("libc.so", "pthread_join");
  if (!sgemm || !create || !join) return 7;
  Gemm g{sgemm, int(in[0].shape[0]), int(in[1].shape[1]), int(in[0].shape[1]), in[0].data, in[1].data, out[0].data};
  unsigned long thread = 0;
  if (create(&thread, nullptr, run_gemm, &g) != 0) return 8;  // no thread here: the test says so
  join(thread, nullptr);
  const float* b = in[2].data;
  for (int i = 0; i < g.M; ++i)
    for (int j = 0; j < g.N; ++j) {
      const float v = g.y[i * g.N + j] + b[j];
      g.y[i * g.N + j] = v > 0.f ? v : 0.f;
    }
  return 0;
}
