#pragma once
// File-system helpers: whole-file reads with errors that name the file, and a replacement for
// std::filesystem::remove_all: PyTorch's LibTorch (2.x wheels) exports its own copy of
// std::filesystem symbols, and the dynamic linker binds our calls to it; its remove_all jumps
// through a null pointer when called off the main thread (seen on the GPU machine: every evaluator
// worker thread that cleaned a compile directory crashed).
#include <string>

namespace turnrl {

// The whole content of the file at `path`, its bytes as they are. Throws turnrl::Error when it
// cannot be opened or read (a directory included), naming the path, `what` the file is for the
// reader ("the config file") and the system's reason.
std::string read_file(const std::string& path, const char* what = "the file");

// Removes `path` and everything below it (symlinks are removed, never followed). A missing path
// is not an error. Returns false and fills *error (when given) on the first failure.
bool remove_tree(const std::string& path, std::string* error = nullptr);

}  // namespace turnrl
