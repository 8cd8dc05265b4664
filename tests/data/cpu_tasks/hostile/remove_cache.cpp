// Lists the compile cache with opendir and removes every entry.
#include <turnrl/kernels/candidate_api.h>
#include <cstdio>
#include <dirent.h>
#include <string>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  for (const char* dir : {"@CACHE@/objects", "@CACHE@"}) {
    DIR* d = opendir(dir);
    if (!d) continue;
    while (dirent* e = readdir(d)) std::remove((std::string(dir) + "/" + e->d_name).c_str());
    closedir(d);
  }
  return 1;
}
