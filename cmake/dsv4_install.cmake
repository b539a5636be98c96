# `cmake --install`: what a kernel project needs to use the oracle from its own build.
#   <prefix>/bin/dsv4-verify
#   <prefix>/lib/libdsv4_*.a                         the libraries (static)
#   <prefix>/include/dsv4_oracle/{reference,verify,cuda}/...   headers, included as "reference/layer.h"
#   <prefix>/share/dsv4_oracle/                      tolerances/*.json, plot_precision_report.py
#   <prefix>/lib/cmake/dsv4_oracle/                  the package: find_package(dsv4_oracle)
# The package's targets: dsv4_oracle::reference (the CPU oracle), dsv4_oracle::verify (capture
# I/O, comparators, tolerance tables, reports), dsv4_oracle::layouts (engine cache layouts and
# conventions) and, when nvcc was found, dsv4_oracle::cuda (the kernels, every family). They carry the oracle's compile flags (x86-64-v3, no FP contraction, Eigen's threading
# off) to the code that includes the oracle's headers, so inlined oracle code computes as the library does.
# verify/paths/data_dir.h finds the data relative to the executable: keep the data in share/dsv4_oracle.
include(CMakePackageConfigHelpers)

set(DSV4_INSTALL_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}/dsv4_oracle")
set(DSV4_INSTALL_DATADIR "share/dsv4_oracle")  # fixed: data_dir.h looks for exactly this
set(DSV4_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/dsv4_oracle")

# Libraries, with the names consumers see (dsv4_oracle::<EXPORT_NAME>).
set_target_properties(dsv4_options PROPERTIES EXPORT_NAME options)
set_target_properties(dsv4_reference PROPERTIES EXPORT_NAME reference)
set_target_properties(dsv4_verify PROPERTIES EXPORT_NAME verify)
set(dsv4_exported dsv4_options dsv4_reference dsv4_verify)
if(TARGET dsv4_hdf5)  # verify/CMakeLists.txt's stand-in when FindHDF5 gives no HDF5::HDF5
  list(APPEND dsv4_exported dsv4_hdf5)
endif()
if(TARGET dsv4_layouts)  # engine cache layouts and index / lse conventions (verify/layouts/)
  set_target_properties(dsv4_layouts PROPERTIES EXPORT_NAME layouts)
  list(APPEND dsv4_exported dsv4_layouts)
endif()
# dsv4_cuda links one static library per kernel family (cuda/CMakeLists.txt, dsv4_cuda_library):
# exported as dsv4_oracle::cuda and dsv4_oracle::cuda_<family>.
set(DSV4_INSTALL_CUDA OFF)
if(TARGET dsv4_cuda)
  set(DSV4_INSTALL_CUDA ON)
  set_target_properties(dsv4_cuda PROPERTIES EXPORT_NAME cuda)
  list(APPEND dsv4_exported dsv4_cuda)
  get_target_property(dsv4_cuda_families dsv4_cuda INTERFACE_LINK_LIBRARIES)
  foreach(family_lib ${dsv4_cuda_families})
    if(TARGET ${family_lib} AND family_lib MATCHES "^dsv4_cuda_(.+)$")
      set_target_properties(${family_lib} PROPERTIES EXPORT_NAME cuda_${CMAKE_MATCH_1})
      list(APPEND dsv4_exported ${family_lib})
    endif()
  endforeach()
endif()
install(TARGETS ${dsv4_exported} EXPORT dsv4_oracleTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS dsv4-verify RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Headers of the exported libraries (not their tests' or tools').
install(DIRECTORY reference/ DESTINATION ${DSV4_INSTALL_INCLUDEDIR}/reference
        FILES_MATCHING PATTERN "*.h" PATTERN "tests" EXCLUDE PATTERN "tools" EXCLUDE)
foreach(part hdf5 capture compare tolerance report paths layouts)
  install(DIRECTORY verify/${part}/ DESTINATION ${DSV4_INSTALL_INCLUDEDIR}/verify/${part}
          FILES_MATCHING PATTERN "*.h" PATTERN "tests" EXCLUDE)
endforeach()
if(DSV4_INSTALL_CUDA)
  install(DIRECTORY cuda/ DESTINATION ${DSV4_INSTALL_INCLUDEDIR}/cuda
          FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh" PATTERN "tests" EXCLUDE)
endif()

# Data: what the build tree's share/dsv4_oracle holds (cmake/dsv4_data_dir.cmake).
install(FILES ${DSV4_TOLERANCE_TABLES} DESTINATION ${DSV4_INSTALL_DATADIR}/tolerances)
install(FILES ${DSV4_PLOT_SCRIPT_SOURCE} DESTINATION ${DSV4_INSTALL_DATADIR})

# The package.
install(EXPORT dsv4_oracleTargets NAMESPACE dsv4_oracle:: DESTINATION ${DSV4_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/dsv4_oracleConfig.cmake.in
                              "${CMAKE_CURRENT_BINARY_DIR}/dsv4_oracleConfig.cmake"
                              INSTALL_DESTINATION ${DSV4_INSTALL_CMAKEDIR}
                              PATH_VARS DSV4_INSTALL_DATADIR)
# 0.x: a new minor version may break the interface.
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/dsv4_oracleConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/dsv4_oracleConfig.cmake"
              "${CMAKE_CURRENT_BINARY_DIR}/dsv4_oracleConfigVersion.cmake"
              cmake/dsv4_find_cuda_toolkit.cmake
        DESTINATION ${DSV4_INSTALL_CMAKEDIR})
