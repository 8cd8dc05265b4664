# Finds every dependency once; both Debian's LibTorch 1.13 (CPU) and the LibTorch 2.x + CUDA
# shipped inside PyTorch must configure here.
include(GNUInstallDirs)

find_package(Torch REQUIRED)
find_package(fmt REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
# nlohmann-json reads tokenizer.json, safetensors headers and HF config.json; for the byte-level BPE
# tokenizers (model/bpe_tokenizer.h) PCRE2 runs
# the pre-tokenizer regexes (\p{L} needs UTF + UCP), ICU normalizes to NFC where the file says so.
find_package(nlohmann_json 3 REQUIRED)
find_package(ICU REQUIRED COMPONENTS uc)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET GLOBAL libpcre2-8)
find_package(ZLIB REQUIRED)   # PNG plots (deflate); LibTorch links it already
find_package(CLI11 REQUIRED)  # the turnrl program's argument parser (header-only)

# PyTorch's include folder carries its own (newer) fmt headers; the compiled libfmt from Debian
# would then be linked against mismatching declarations. Header-only fmt is immune to that.
set(TURNRL_FMT_TARGET fmt::fmt)
get_target_property(_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
  if(EXISTS "${dir}/fmt/core.h" AND NOT dir IN_LIST _fmt_include)
    set(TURNRL_FMT_TARGET fmt::fmt-header-only)
  endif()
endforeach()

# CUDA parts need both the toolkit (NVRTC, driver API, CUPTI) and a LibTorch built with CUDA.
set(TURNRL_CUDA_ENABLED OFF)
if(NOT TURNRL_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  set(_torch_has_cuda OFF)
  if(TARGET torch_cuda OR TARGET c10_cuda)
    set(_torch_has_cuda ON)
  endif()
  if(CUDAToolkit_FOUND AND _torch_has_cuda)
    set(TURNRL_CUDA_ENABLED ON)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES native)  # the GPU of the build machine (sm_90a on the H200)
    endif()
    if(NOT CMAKE_CUDA_HOST_COMPILER)
      set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
    endif()
    enable_language(CUDA)
  elseif(TURNRL_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TURNRL_WITH_CUDA=ON but CUDAToolkit_FOUND=${CUDAToolkit_FOUND}, LibTorch CUDA=${_torch_has_cuda}")
  endif()
endif()
message(STATUS "turnrl: LibTorch ${Torch_VERSION}, fmt target ${TURNRL_FMT_TARGET}, CUDA parts ${TURNRL_CUDA_ENABLED}")

# NCCL (the `nccl` communicator of trainer/distributed.h) in CUDA builds: the toolkit's copy, or
# the one PyTorch's pip wheels ship in site-packages/nvidia/nccl (whose library is only named
# libnccl.so.2). Without it nccl_communicator_cuda.cpp is left out and ranks talk over tcp.
set(TURNRL_WITH_NCCL "AUTO" CACHE STRING "Build the NCCL communicator: AUTO (in CUDA builds where NCCL is found) or OFF")
set(TURNRL_NCCL_ENABLED OFF)
if(TURNRL_CUDA_ENABLED AND NOT TURNRL_WITH_NCCL STREQUAL "OFF")
  # The wheel's first: LibTorch's own libtorch_cuda loads that libnccl.so.2.
  set(_nccl_hints)
  execute_process(COMMAND python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
                  OUTPUT_VARIABLE _nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _nccl_wheel_rc)
  if(_nccl_wheel_rc EQUAL 0 AND IS_DIRECTORY "${_nccl_wheel}")
    list(APPEND _nccl_hints ${_nccl_wheel}/include ${_nccl_wheel}/lib)
  endif()
  list(APPEND _nccl_hints ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR})
  find_path(TURNRL_NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints})
  find_library(TURNRL_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints})
  if(TURNRL_NCCL_INCLUDE_DIR AND TURNRL_NCCL_LIBRARY)
    set(TURNRL_NCCL_ENABLED ON)
    message(STATUS "turnrl: NCCL found: ${TURNRL_NCCL_LIBRARY} (headers ${TURNRL_NCCL_INCLUDE_DIR})")
  else()
    message(STATUS "turnrl: NCCL not found (nccl.h: ${TURNRL_NCCL_INCLUDE_DIR}, library: ${TURNRL_NCCL_LIBRARY}); "
                   "distributed training uses the tcp communicator")
  endif()
endif()

# The remote evaluator (Redis streams) needs hiredis; without it the *_redis.cpp units and the
# `remote` backend are left out, and the rest of turnrl builds as before.
set(TURNRL_REDIS_ENABLED OFF)
if(NOT TURNRL_WITH_REDIS STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(HIREDIS QUIET IMPORTED_TARGET GLOBAL hiredis)
  endif()
  if(HIREDIS_FOUND)
    set(TURNRL_REDIS_ENABLED ON)
    # hiredis.pc adds -D_FILE_OFFSET_BITS=64 (a no-op on 64-bit hosts) and its own header folder
    # (whose read.h, sds.h... could shadow others). On the library's sources the define would
    # invalidate the precompiled header every program reuses: keep only the folder above it, for
    # <hiredis/hiredis.h>.
    get_filename_component(_hiredis_parent "${HIREDIS_INCLUDEDIR}" DIRECTORY)
    set_target_properties(PkgConfig::HIREDIS PROPERTIES INTERFACE_COMPILE_OPTIONS ""
                                                        INTERFACE_INCLUDE_DIRECTORIES "${_hiredis_parent}")
  elseif(TURNRL_WITH_REDIS STREQUAL "ON")
    message(FATAL_ERROR "TURNRL_WITH_REDIS=ON but hiredis was not found through pkg-config (apt install libhiredis-dev)")
  endif()
endif()
if(TURNRL_REDIS_ENABLED)
  message(STATUS "turnrl: hiredis ${HIREDIS_VERSION}: remote evaluator (Redis) built")
else()
  message(STATUS "turnrl: remote evaluator left out (TURNRL_WITH_REDIS=${TURNRL_WITH_REDIS}; it needs hiredis: apt install libhiredis-dev)")
endif()

# The evaluator's sandbox builds its seccomp filters with libseccomp (src/kernels/syscall_filter.cpp).
find_package(PkgConfig REQUIRED)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET GLOBAL libseccomp)

set(TURNRL_WARNINGS -Wall -Wextra -Wno-unused-parameter)
