# libtorch, for the example of examples/torch and its tests (label torch),
# never for libgeeps itself. Found here, at the top, so that its imported
# targets are seen by examples/ and tests/ alike. Sets GEEPS_HAVE_TORCH.
#   GEEPS_WITH_TORCH=AUTO  on where find_package(Torch) succeeds, with one
#                          line saying why where it does not
#   ON                     find_package(Torch) must succeed
#   OFF                    neither looked for nor built (the sanitizer and
#                          fuzzing builds: libtorch is not instrumented)
set(GEEPS_HAVE_TORCH OFF)
if(NOT GEEPS_WITH_TORCH STREQUAL "OFF" AND GEEPS_BUILD_EXAMPLES)
  find_package(Torch QUIET)
  if(Torch_FOUND)
    set(GEEPS_HAVE_TORCH ON)
    message(STATUS "libgeeps: the libtorch example and its tests are on (Torch ${Torch_VERSION})")
  elseif(GEEPS_WITH_TORCH STREQUAL "ON")
    message(FATAL_ERROR "GEEPS_WITH_TORCH=ON but find_package(Torch) failed (Debian: libtorch-dev)")
  else()
    message(STATUS "libgeeps: the libtorch example and its tests are off: Torch not found "
                   "(bash scripts/run-torch-example.sh installs Debian's libtorch-dev)")
  endif()
endif()
