# Calls that must not appear in the sources (CTest `forbidden_calls`), each with the reason.
#   cmake -DSOURCE_DIR=<repo> -P tests/forbidden_calls.cmake
# std::filesystem::remove_all: PyTorch's LibTorch 2.x exports its own copy of std::filesystem, the
# dynamic linker binds our calls to it, and its remove_all jumps through a null pointer (on the GPU
# machine: evaluator threads, and a test's scratch folder, crashed). turnrl::remove_tree
# (core/filesystem.h) is the replacement.
if(NOT DEFINED SOURCE_DIR)
  message(FATAL_ERROR "forbidden_calls.cmake needs -DSOURCE_DIR=<repository root>")
endif()
set(forbidden "(std::filesystem|fs)::remove_all[ \t]*\\(")
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/include/*.h ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cpp
     ${SOURCE_DIR}/tests/*.h ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/benchmarks/*.h ${SOURCE_DIR}/benchmarks/*.cpp
     ${SOURCE_DIR}/examples/*.cpp)
set(violations "")
foreach(file IN LISTS files)
  file(STRINGS ${SOURCE_DIR}/${file} hits REGEX "${forbidden}")
  foreach(line IN LISTS hits)
    string(STRIP "${line}" line)
    string(APPEND violations "\n  ${file}: ${line}")
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "std::filesystem::remove_all (use turnrl::remove_tree, core/filesystem.h):${violations}")
endif()
list(LENGTH files count)
message(STATUS "forbidden_calls: ${count} files, no std::filesystem::remove_all")
