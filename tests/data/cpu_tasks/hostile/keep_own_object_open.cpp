// A route to the candidate's own code after it is loaded: its load-time constructor (run inside
// dlopen, while the object's file still exists in the worker's directory) opens that file for
// writing and keeps the descriptor. Written through later, the file changes the code its private,
// never-written mapping shows, inside a call, and can be put back before the parent compares the
// sampled code with the object. The worker refuses an object whose file is still held after
// loading; should this one load, it returns the right answer and the probe test fails.
#include <turnrl/kernels/candidate_api.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
extern "C" int __open(const char*, int, ...);
extern "C" long __read(int, void*, unsigned long);
extern "C" int __close(int);
static int held = -1;
__attribute__((constructor)) static void hold_own_file() {
  const char maps[] = {'/', 'p', 'r', 'o', 'c', '/', 's', 'e', 'l', 'f', '/', 'm', 'a', 'p', 's', 0};
  static char text[1 << 20];
  const int fd = __open(maps, O_RDONLY);
  if (fd < 0) return;
  long n = 0;
  for (long r; (r = __read(fd, text + n, sizeof text - 1 - n)) > 0;) n += r;
  __close(fd);
  text[n] = 0;
  for (char* line = strtok(text, "\n"); line; line = strtok(nullptr, "\n")) {
    char path[512] = {0};
    if (!strstr(line, "candidate-") || sscanf(line, "%*s %*s %*s %*s %*s %511s", path) != 1) continue;
    held = __open(path, O_RDWR);
    if (held >= 0) return;
  }
}
extern "C" int turnrl_kernel(const turnrl_tensor* in, int, turnrl_tensor* out, int, const turnrl_lib*) {
  if (held < 0) return 1;  // the route is closed: no right answer
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const float* x = in[0].data;
  const float* b = in[1].data;
  float* y = out[0].data;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const float v = x[r * C + c] + b[c];
      y[r * C + c] = v > 0.f ? v : 0.f;
    }
  return 0;
}
