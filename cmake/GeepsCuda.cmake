# GEEPS_WITH_CUDA: AUTO builds the CUDA backend when a CUDA compiler is found,
# ON requires it, OFF skips it. The backend itself arrives with a later issue;
# this file only detects the toolchain and sets GEEPS_HAVE_CUDA.
set(GEEPS_HAVE_CUDA OFF)
if(NOT GEEPS_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(GEEPS_HAVE_CUDA ON)
  elseif(GEEPS_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GEEPS_WITH_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "libgeeps: CUDA toolchain found: ${GEEPS_HAVE_CUDA}")
