# Finds every dependency once; both Debian's LibTorch 1.13 (CPU) and the LibTorch 2.x + CUDA
# shipped inside PyTorch must configure here.
include(GNUInstallDirs)

find_package(Torch REQUIRED)
find_package(fmt REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)

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

set(TURNRL_WARNINGS -Wall -Wextra -Wno-unused-parameter)
