// Reads the compile cache's objects (other candidates' compiled code) and prints their strings into
// the feedback. Workers receive their own object in the request and never see the cache: the
// directory does not open. Should it open, the candidate returns the right answer instead, and the
// probe test fails because the evaluation was correct.
#include <turnrl/kernels/candidate_api.h>
#include <dirent.h>
#include <stdio.h>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  int seen = 0;
  for (const char* dir : {"@CACHE@", "@CACHE@/objects"}) {
    DIR* d = opendir(dir);
    if (!d) continue;
    while (dirent* e = readdir(d)) seen += e->d_name[0] != '.';
    closedir(d);
  }
  printf("cache entries seen: %d\n", seen);
  if (seen == 0) return 1;
  // relu(x + b), the right answer: reached only when the cache was visible.
  const int64_t cols = in[1].numel;
  for (int64_t i = 0; i < in[0].numel; ++i) {
    const float v = in[0].data[i] + in[1].data[i % cols];
    out[0].data[i] = v > 0 ? v : 0;
  }
  return 0;
}
