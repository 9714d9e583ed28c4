# The CUDA backend (src/device/cuda) and the CUDA libraries the examples use.
#
# GEEPS_WITH_CUDA: AUTO builds the backend when check_language(CUDA) finds a
# CUDA compiler and find_package(CUDAToolkit) succeeds; ON requires both; OFF
# skips CUDA entirely. Without nvcc (AUTO) the build goes on without CUDA.
#
# Sets, for the rest of the build:
#   GEEPS_HAVE_CUDA      ON when the backend is built (the library then gets
#                        GEEPS_HAVE_CUDA=1 and links CUDA::cudart_static)
#   GEEPS_CUDNN_FOUND    ON when cudnn.h and libcudnn were found; then the
#                        imported target geeps_cudnn exists (for examples)
#   CUDA::cublas         (from FindCUDAToolkit) for examples; the library
#                        itself does not link cuBLAS.
#
# cudart is linked statically: a shared libgeeps then carries the runtime and
# its consumers need neither nvcc nor libcudart at their link. The driver
# (libcuda) is loaded at run time by cudart, so a machine without a GPU driver
# runs the library too (the CUDA backend then reports "no GPU").
set(GEEPS_HAVE_CUDA OFF)
set(GEEPS_CUDNN_FOUND OFF)
if(NOT GEEPS_WITH_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "GEEPS_WITH_CUDA must be AUTO, ON or OFF (got '${GEEPS_WITH_CUDA}')")
endif()

if(NOT GEEPS_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Hopper, plus PTX so that newer GPUs JIT-compile it. One real
    # architecture keeps the .cu compile short on small CI machines.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING
        "CUDA architectures of the libgeeps kernels" FORCE)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cudart_static)
      set(GEEPS_HAVE_CUDA ON)
    endif()
  endif()
  if(NOT GEEPS_HAVE_CUDA AND GEEPS_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GEEPS_WITH_CUDA=ON but no CUDA compiler or toolkit "
      "was found (set CMAKE_CUDA_COMPILER or CUDAToolkit_ROOT)")
  endif()
endif()

if(GEEPS_HAVE_CUDA)
  # cuDNN has no CMake module: look for it next to the toolkit or in the
  # usual system places; CUDNN_ROOT overrides.
  find_path(GEEPS_CUDNN_INCLUDE_DIR cudnn.h
    HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
          ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES include)
  find_library(GEEPS_CUDNN_LIBRARY cudnn
    HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
          ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES lib lib64 lib/x64)
  if(GEEPS_CUDNN_INCLUDE_DIR AND GEEPS_CUDNN_LIBRARY)
    set(GEEPS_CUDNN_FOUND ON)
    if(NOT TARGET geeps_cudnn)
      add_library(geeps_cudnn UNKNOWN IMPORTED)
      set_target_properties(geeps_cudnn PROPERTIES
        IMPORTED_LOCATION "${GEEPS_CUDNN_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${GEEPS_CUDNN_INCLUDE_DIR}")
    endif()
  endif()
  message(STATUS "libgeeps: CUDA backend: ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
    "architectures ${CMAKE_CUDA_ARCHITECTURES}); cuDNN: ${GEEPS_CUDNN_FOUND}")
else()
  message(STATUS "libgeeps: CUDA backend: OFF (GEEPS_WITH_CUDA=${GEEPS_WITH_CUDA})")
endif()
