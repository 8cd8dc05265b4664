// Writes 240 MiB in 30 files: in its own directory, in the system's temporary folder and next to
// the run.
#include <turnrl/kernels/candidate_api.h>
#include <fstream>
#include <string>
#include <vector>
extern "C" int turnrl_kernel(const turnrl_tensor* in, int n_in, turnrl_tensor* out, int n_out, const turnrl_lib* lib) {
  const std::vector<char> block(8 << 20, 'x');
  for (const std::string dir : {".", "/tmp", "@OUT@/run"})
    for (int k = 0; k < 30; ++k) {
      std::ofstream f(dir + "/turnrl_probe_blob_" + std::to_string(k), std::ios::binary);
      f.write(block.data(), std::streamsize(block.size()));
    }
  return 1;
}
