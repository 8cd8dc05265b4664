// Overwrites every compiled object of the compile cache through C++ file streams.
#include <turnrl/kernels/candidate_api.h>
#include <dirent.h>
#include <fstream>
#include <string>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  for (const char* dir : {"@CACHE@", "@CACHE@/objects"}) {
    DIR* d = opendir(dir);
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::ofstream(std::string(dir) + "/" + name, std::ios::trunc) << "garbage";
    }
    closedir(d);
  }
  return 1;
}
