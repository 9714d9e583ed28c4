# Install rules and the exported package of the geeps library target:
#   <libdir>/libgeeps.{so,a}, <includedir>/geeps/*.h,
#   <libdir>/cmake/geeps/ (geepsConfig.cmake, its version file, geepsTargets)
#   <libdir>/pkgconfig/geeps.pc
# Included by the top-level CMakeLists.txt after add_subdirectory(src).
include(CMakePackageConfigHelpers)

set(GEEPS_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/geeps)

# The public headers need C++17 (std::optional); say so to consumers.
target_compile_features(geeps PUBLIC cxx_std_17)

install(TARGETS geeps EXPORT geepsTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/geeps
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(EXPORT geepsTargets
  NAMESPACE geeps::
  DESTINATION ${GEEPS_CMAKE_INSTALL_DIR})

# A static libgeeps carries its private link dependencies (Threads, and
# PkgConfig::ZMQ) into the export; geepsConfig.cmake then recreates them.
get_target_property(_geeps_type geeps TYPE)
if(_geeps_type STREQUAL "STATIC_LIBRARY")
  set(GEEPS_STATIC ON)
else()
  set(GEEPS_STATIC OFF)
endif()

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/geepsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/geepsConfig.cmake
  INSTALL_DESTINATION ${GEEPS_CMAKE_INSTALL_DIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/geepsConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/geepsConfig.cmake
  ${PROJECT_BINARY_DIR}/geepsConfigVersion.cmake
  DESTINATION ${GEEPS_CMAKE_INSTALL_DIR})

# geeps.pc finds its prefix from its own place (${pcfiledir}), so that
# `cmake --install <build> --prefix <any>` gives a working file. Absolute
# CMAKE_INSTALL_{LIB,INCLUDE}DIR are written as they are.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(GEEPS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _geeps_pc_up
    "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" _geeps_pc_up "${_geeps_pc_up}")
  set(GEEPS_PC_PREFIX "\${pcfiledir}/${_geeps_pc_up}")
endif()
set(GEEPS_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
set(GEEPS_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
if(NOT IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(GEEPS_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(NOT IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(GEEPS_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# A static libgeeps needs libzmq and threads at every link, not just a static
# one (`pkg-config --static` on Debian asks for static archives that libzmq's
# own dependencies do not ship).
if(GEEPS_STATIC)
  set(GEEPS_PC_REQUIRES "Requires: libzmq")
  set(GEEPS_PC_LIBS "-lgeeps -pthread")
else()
  set(GEEPS_PC_REQUIRES "Requires.private: libzmq")
  set(GEEPS_PC_LIBS "-lgeeps")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/geeps.pc.in
  ${PROJECT_BINARY_DIR}/geeps.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/geeps.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
