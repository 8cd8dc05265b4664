// Class 4 (library time must come from something the candidate cannot rewrite): the hidden
// cblas_sgemm of matmul_bias_relu_hidden_cblas_link_map, wrapped in a forged pair of library marks
// so that the sampler takes its samples for a served routine's. The pair is written on the result
// channel (descriptor 3) with glibc's __write (looked up, not imported), names the served `add` routine, carries the
// real monotonic clock around the GEMM and a CPU clock of 0 at both edges (no library CPU time); the
// worker's counter of `add` calls is bumped (the worker executable's symbol table, read through
// /proc/self/exe) so that the counters report as many calls as were marked. The spans' samples
// count as library time whatever the marks say (cpu_backend.cpp): no_candidate_work or lazy.
#include <turnrl/kernels/candidate_api.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <chrono>
#include <vector>

// glibc's functions found through the dynamic loader's list of loaded objects (_r_debug) and libc's
// in-memory symbol table, not imported: the import check refuses their names and aliases, and the
// walls behind it must hold without it.
static void* libc_function(const char* name) {
  for (const link_map* m = _r_debug.r_map; m; m = m->l_next) {
    if (!m->l_name || !strstr(m->l_name, "libc.so")) continue;
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
static int (*const open_)(const char*, int, ...) = (int (*)(const char*, int, ...))libc_function("__open");
static long (*const read_)(int, void*, unsigned long) = (long (*)(int, void*, unsigned long))libc_function("__read");
static long (*const write_)(int, const void*, unsigned long) = (long (*)(int, const void*, unsigned long))libc_function("__write");
static int (*const close_)(int) = (int (*)(int))libc_function("__close");

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

// The worker's counters (cpu_worker.cpp's g_lib): from the executable's static symbol table, placed
// by the served `add` routine's address, which the table hands over.
struct Counter {
  double us;
  int64_t calls;
};
static uint64_t symbol_value(const std::vector<char>& file, const char* prefix, const char* contains) {
  const ElfW(Ehdr)* eh = (const ElfW(Ehdr)*)file.data();
  const ElfW(Shdr)* sh = (const ElfW(Shdr)*)(file.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_SYMTAB) continue;
    const ElfW(Sym)* sym = (const ElfW(Sym)*)(file.data() + sh[i].sh_offset);
    const char* names = file.data() + sh[sh[i].sh_link].sh_offset;
    for (size_t k = 0; k < sh[i].sh_size / sizeof(ElfW(Sym)); ++k) {
      const char* n = names + sym[k].st_name;
      if (strncmp(n, prefix, strlen(prefix)) == 0 && strstr(n, contains)) return sym[k].st_value;
    }
  }
  return 0;
}
static Counter* find_counters(const turnrl_lib* lib) {
  const char exe[] = {'/', 'p', 'r', 'o', 'c', '/', 's', 'e', 'l', 'f', '/', 'e', 'x', 'e', 0};
  std::vector<char> file(size_t(96) << 20);
  const int fd = open_(exe, 0);
  if (fd < 0) return nullptr;
  size_t n = 0;
  for (long r; (r = read_(fd, file.data() + n, file.size() - n)) > 0;) n += size_t(r);
  close_(fd);
  const uint64_t add = symbol_value(file, "_ZN6turnrl10cpu_detail", "lib_addEPKfS");
  const uint64_t counters = symbol_value(file, "_ZN6turnrl10cpu_detail", "g_libE");
  if (!add || !counters) return nullptr;
  return (Counter*)((uintptr_t)lib->add - add + counters);
}

static uint64_t monotonic_ns() {  // libstdc++'s steady_clock reads CLOCK_MONOTONIC
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
}
static void forged_mark(char edge, uint64_t cpu_ns, uint64_t mono_ns) {
  char f[27] = {19};
  f[8] = 'L';
  f[9] = edge;
  f[10] = 5;  // the served `add`
  for (int i = 0; i < 8; ++i) f[11 + i] = char((cpu_ns >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) f[19 + i] = char((mono_ns >> (8 * i)) & 0xff);
  write_(3, f, sizeof f);
}

extern "C" int turnrl_kernel(const turnrl_tensor* in, int, turnrl_tensor* out, int, const turnrl_lib* lib) {
  static const cblas_sgemm_fn sgemm = find_cblas_sgemm();
  static Counter* const counters = find_counters(lib);
  if (!sgemm) return 7;
  if (!counters) return 8;
  const int M = int(in[0].shape[0]), K = int(in[0].shape[1]), N = int(in[1].shape[1]);
  float* y = out[0].data;
  const float* b = in[2].data;
  forged_mark('E', 0, monotonic_ns());
  sgemm(101 /* row major */, 111 /* no transpose */, 111, M, N, K, 1.f, in[0].data, K, in[1].data, N, 0.f, y, N);
  forged_mark('X', 0, monotonic_ns());
  counters[5].calls += 1;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const float v = y[i * N + j] + b[j];
      y[i * N + j] = v > 0.f ? v : 0.f;
    }
  return 0;
}
