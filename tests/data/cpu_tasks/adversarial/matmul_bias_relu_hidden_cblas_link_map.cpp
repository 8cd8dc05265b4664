// Class 4 (library time must come from something the candidate cannot rewrite): a lazy
// matmul_bias_relu that calls cblas_sgemm of the BLAS the worker already has loaded (behind
// LibTorch), found without any import the import check names, without a file and without a
// served routine: the dynamic loader's own list of loaded objects (_r_debug, a versioned glibc
// symbol), that object's in-memory dynamic section and symbol table. No library mark, no counter:
// before its samples were read it scored coverage 1.0 on the GEMM, which is nearly all of the
// reference's work. Only the bias and the ReLU are its own. Caught by sampling from outside the
// worker where its thread ran (library_samples.h): the samples land in libblas, and that time counts
// as library time (no_candidate_work or lazy).
#include <turnrl/kernels/candidate_api.h>
#include <elf.h>
#include <link.h>
#include <string.h>

typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                               float*, int);

static cblas_sgemm_fn find_cblas_sgemm() {
  for (const link_map* m = _r_debug.r_map; m; m = m->l_next) {
    if (!m->l_name || !strstr(m->l_name, "libblas")) continue;
    const ElfW(Sym)* symbols = nullptr;
    const char* names = nullptr;
    for (const ElfW(Dyn)* d = m->l_ld; d->d_tag != DT_NULL; ++d) {
      uintptr_t p = d->d_un.d_ptr;
      if (p < m->l_addr) p += m->l_addr;
      if (d->d_tag == DT_SYMTAB) symbols = (const ElfW(Sym)*)p;
      if (d->d_tag == DT_STRTAB) names = (const char*)p;
    }
    if (!symbols || !names) continue;
    for (const ElfW(Sym)* s = symbols; (const char*)s < names; ++s)
      if (s->st_value && strcmp(names + s->st_name, "cblas_sgemm") == 0) return (cblas_sgemm_fn)(m->l_addr + s->st_value);
  }
  return nullptr;
}

extern "C" int turnrl_kernel(const turnrl_tensor* in, int, turnrl_tensor* out, int, const turnrl_lib*) {
  static const cblas_sgemm_fn sgemm = find_cblas_sgemm();
  if (!sgemm) return 7;
  const int M = int(in[0].shape[0]), K = int(in[0].shape[1]), N = int(in[1].shape[1]);
  float* y = out[0].data;
  const float* b = in[2].data;
  sgemm(101 /* row major */, 111 /* no transpose */, 111, M, N, K, 1.f, in[0].data, K, in[1].data, N, 0.f, y, N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const float v = y[i * N + j] + b[j];
      y[i * N + j] = v > 0.f ? v : 0.f;
    }
  return 0;
}
