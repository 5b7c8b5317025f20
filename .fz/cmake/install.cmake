# Install rules: the library in both variants, the header, a CMake package (tparConfig.cmake,
# its version file and exported targets tpar::tpar and tpar::tpar_static), tpar.pc, the
# command (when built) and the docs.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TPAR_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tpar)

install(TARGETS tpar EXPORT tparTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# A separate export set: only consumers of the static library need hwloc and pkg-config.
install(TARGETS tpar_static EXPORT tparStaticTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/tpar/tpar.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tpar)
install(EXPORT tparTargets NAMESPACE tpar:: DESTINATION ${TPAR_CMAKE_DIR})
install(EXPORT tparStaticTargets NAMESPACE tpar:: DESTINATION ${TPAR_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tparConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/tparConfig.cmake
                              INSTALL_DESTINATION ${TPAR_CMAKE_DIR})
# 0.x: a minor release may change the ABI, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tparConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tparConfig.cmake ${PROJECT_BINARY_DIR}/tparConfigVersion.cmake
        DESTINATION ${TPAR_CMAKE_DIR})

# pkg-config: tpar.h includes cuda_runtime_api.h, so Cflags carries the CUDA include path.
list(GET CUDAToolkit_INCLUDE_DIRS 0 TPAR_PC_CUDA_INCLUDE)
set(TPAR_PC_CUDA_LIBDIR ${CUDAToolkit_LIBRARY_DIR})
# Relocatable: the prefix is found from where the .pc file lies (lib/pkgconfig, or
# lib/<multiarch>/pkgconfig), unless the install directories are absolute paths.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(TPAR_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(TPAR_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _tpar_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" _tpar_up "${_tpar_up}")
  set(TPAR_PC_PREFIX "\${pcfiledir}/${_tpar_up}")
  set(TPAR_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TPAR_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(TPAR_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/tpar.pc.in ${PROJECT_BINARY_DIR}/tpar.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tpar.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/LICENSE
              ${PROJECT_SOURCE_DIR}/CHANGELOG.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
        FILES_MATCHING PATTERN "*.md")
if(TARGET tpar_cli)
  install(TARGETS tpar_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
# Found from lib/ and bin/ alike as ../libexec/tpar/tpar-hwloc-probe.
install(TARGETS tpar_hwloc_probe RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/tpar)
