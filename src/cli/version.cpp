// `turnrl --version`: what a bug report needs to say about this build.
#include <string>

#include <fmt/format.h>
#include <torch/version.h>

#include "commands.h"
#include "turnrl_build_info.h"  // generated at configure time: version and git commit

namespace turnrl::cli {

std::string version_text() {
  std::string backends = "cpu";
#ifdef TURNRL_WITH_CUDA
  backends += ", cuda";
#endif
  backends += ", python";  // always built; needs a Python interpreter with torch at run time
#ifdef TURNRL_WITH_REDIS
  backends += ", remote";
#endif
#ifdef TURNRL_WITH_NCCL
  const char* nccl = "yes";
#else
  const char* nccl = "no";
#endif
  return fmt::format("turnrl {}\ngit commit: {}\nLibTorch: {}.{}.{}\nevaluator backends: {}\nNCCL: {}",
                     TURNRL_BUILD_VERSION, TURNRL_BUILD_GIT_COMMIT, TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
                     TORCH_VERSION_PATCH, backends, nccl);
}

}  // namespace turnrl::cli
