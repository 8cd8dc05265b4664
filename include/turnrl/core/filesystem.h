#pragma once
// File-system helpers the library uses instead of std::filesystem::remove_all: PyTorch's LibTorch
// (2.x wheels) exports its own copy of std::filesystem symbols, and the dynamic linker binds our
// calls to it; its remove_all jumps through a null pointer when called off the main thread (seen
// on the GPU machine: every evaluator worker thread that cleaned a compile directory crashed).
#include <string>

namespace turnrl {

// Removes `path` and everything below it (symlinks are removed, never followed). A missing path
// is not an error. Returns false and fills *error (when given) on the first failure.
bool remove_tree(const std::string& path, std::string* error = nullptr);

}  // namespace turnrl
