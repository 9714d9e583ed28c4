# The install_consumer test: installs a libgeeps build tree into a scratch
# prefix, then uses it from outside as a user would:
#   1. find_package(geeps CONFIG) in a separate CMake project (this folder),
#      which is built and run;
#   2. pkg-config --cflags --libs geeps, whose flags build and run main.cc again.
#
#   cmake -DBUILD_DIR=<libgeeps build> [-DWORK_DIR=<scratch>] [-DCONFIG=<cfg>]
#         -P run_consumer_test.cmake
# Generator, compiler, build type, libdir and sanitizers come from the build
# tree's CMakeCache.txt.
cmake_minimum_required(VERSION 3.20)

if(NOT BUILD_DIR OR NOT EXISTS "${BUILD_DIR}/CMakeCache.txt")
  message(FATAL_ERROR "BUILD_DIR must name a configured libgeeps build tree")
endif()
get_filename_component(BUILD_DIR "${BUILD_DIR}" ABSOLUTE)
if(NOT WORK_DIR)
  set(WORK_DIR "${BUILD_DIR}/install_consumer")
endif()
set(CONSUMER_DIR "${CMAKE_CURRENT_LIST_DIR}")
set(PREFIX "${WORK_DIR}/prefix")

# geeps_cache(<var> <entry>): <var> = the build tree's cache entry (or empty).
function(geeps_cache var entry)
  file(STRINGS "${BUILD_DIR}/CMakeCache.txt" line REGEX "^${entry}:[A-Z]+=" LIMIT_COUNT 1)
  string(REGEX REPLACE "^[^=]*=" "" value "${line}")
  set(${var} "${value}" PARENT_SCOPE)
endfunction()
geeps_cache(GENERATOR CMAKE_GENERATOR)
geeps_cache(CXX CMAKE_CXX_COMPILER)
geeps_cache(BUILD_TYPE CMAKE_BUILD_TYPE)
geeps_cache(LIBDIR CMAKE_INSTALL_LIBDIR)
geeps_cache(SANITIZE GEEPS_SANITIZE)
geeps_cache(PKG_CONFIG PKG_CONFIG_EXECUTABLE)
if(NOT LIBDIR)
  set(LIBDIR lib)
endif()
if(NOT PKG_CONFIG)
  find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
endif()
set(SAN_FLAGS "")
if(SANITIZE)
  set(SAN_FLAGS "-fsanitize=${SANITIZE} -fno-omit-frame-pointer")
endif()

# geeps_run(<step> COMMAND <cmd>...): runs a step; stops the test with its
# output when it fails. Sets GEEPS_OUT to its stdout.
function(geeps_run step)
  execute_process(${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
    TIMEOUT 240)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${step} failed (${rc})\n${out}\n${err}")
  endif()
  message(STATUS "install_consumer: ${step}: ok")
  set(GEEPS_OUT "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(config_args "")
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
geeps_run("cmake --install"
  COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" ${config_args})
foreach(f include/geeps/geeps_all.h
          ${LIBDIR}/cmake/geeps/geepsConfig.cmake
          ${LIBDIR}/cmake/geeps/geepsConfigVersion.cmake
          ${LIBDIR}/cmake/geeps/geepsTargets.cmake
          ${LIBDIR}/pkgconfig/geeps.pc)
  if(NOT EXISTS "${PREFIX}/${f}")
    message(FATAL_ERROR "install_consumer: ${PREFIX}/${f} was not installed")
  endif()
endforeach()

# 1. find_package(geeps CONFIG).
set(build_type_arg "")
if(BUILD_TYPE)
  set(build_type_arg "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
geeps_run("configure the consumer (find_package)"
  COMMAND "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${WORK_DIR}/build"
    -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX}" ${build_type_arg}
    "-DCMAKE_CXX_FLAGS=${SAN_FLAGS}"
    "-DCMAKE_PREFIX_PATH=${PREFIX}" "-DGEEPS_EXPECTED_PREFIX=${PREFIX}")
geeps_run("build the consumer"
  COMMAND "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" ${config_args})
set(exe "${WORK_DIR}/build/geeps_consumer")
if(CONFIG AND NOT EXISTS "${exe}")
  set(exe "${WORK_DIR}/build/${CONFIG}/geeps_consumer")
endif()
geeps_run("run the consumer" COMMAND "${exe}")
message("${GEEPS_OUT}")

# 2. pkg-config.
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")
geeps_run("pkg-config --cflags --libs geeps"
  COMMAND "${PKG_CONFIG}" --cflags --libs geeps
  OUTPUT_STRIP_TRAILING_WHITESPACE)
set(pc_flags "${GEEPS_OUT}")
message("pkg-config --cflags --libs geeps: ${pc_flags}")
string(FIND "${pc_flags}" "${PREFIX}/" at)
if(at EQUAL -1 OR NOT pc_flags MATCHES "-lgeeps")
  message(FATAL_ERROR "install_consumer: geeps.pc does not point into ${PREFIX}")
endif()
separate_arguments(pc_list UNIX_COMMAND "${pc_flags}")
separate_arguments(san_list UNIX_COMMAND "${SAN_FLAGS}")
geeps_run("build main.cc with pkg-config's flags"
  COMMAND "${CXX}" -std=c++17 ${san_list} "${CONSUMER_DIR}/main.cc"
    -o "${WORK_DIR}/pc_consumer" ${pc_list})
if(DEFINED ENV{LD_LIBRARY_PATH} AND NOT "$ENV{LD_LIBRARY_PATH}" STREQUAL "")
  set(ENV{LD_LIBRARY_PATH} "${PREFIX}/${LIBDIR}:$ENV{LD_LIBRARY_PATH}")
else()
  set(ENV{LD_LIBRARY_PATH} "${PREFIX}/${LIBDIR}")
endif()
geeps_run("run the pkg-config consumer" COMMAND "${WORK_DIR}/pc_consumer")
