#!/usr/bin/env bash
# Copies the build dependencies of the CUDA-only configure (Eigen, doctest, Google Benchmark:
# headers, the benchmark library, doctest's test-discovery module) of this build machine into .deps/,
# an ignored folder a device call can carry, with small CMake package files pointing into it.
# cuda/run_on_h200.sh configures with -DDSV4_CUDA_ONLY=ON -DCMAKE_PREFIX_PATH=.deps when the full
# configure fails on the device machine (a dependency of the verifier missing there).
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.deps/' "$exclude" 2>/dev/null || echo '/.deps/' >> "$exclude"
rm -rf .deps && mkdir -p .deps/include .deps/lib/cmake/Eigen3 .deps/lib/cmake/doctest .deps/lib/cmake/benchmark
cp -r /usr/include/eigen3 /usr/include/doctest /usr/include/benchmark .deps/include/
cp -P /usr/lib/x86_64-linux-gnu/libbenchmark.so* .deps/lib/
cp /usr/lib/cmake/doctest/doctest.cmake /usr/lib/cmake/doctest/doctestAddTests.cmake .deps/lib/cmake/doctest/

eigen_version=$(sed -n 's/#define EIGEN_\(WORLD\|MAJOR\|MINOR\)_VERSION \([0-9]*\)/\2/p' \
                /usr/include/eigen3/Eigen/src/Core/util/Macros.h | paste -sd.)
config_version() {  # <file> <version>: any requested version up to this one is satisfied
  cat > "$1" <<CFG
set(PACKAGE_VERSION "$2")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
CFG
}
config_version .deps/lib/cmake/Eigen3/Eigen3ConfigVersion.cmake "$eigen_version"
cat > .deps/lib/cmake/Eigen3/Eigen3Config.cmake <<'CFG'
if(NOT TARGET Eigen3::Eigen)
  add_library(Eigen3::Eigen INTERFACE IMPORTED)
  set_target_properties(Eigen3::Eigen PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include/eigen3")
endif()
CFG
cat > .deps/lib/cmake/doctest/doctestConfig.cmake <<'CFG'
if(NOT TARGET doctest::doctest)
  add_library(doctest::doctest INTERFACE IMPORTED)
  set_target_properties(doctest::doctest PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include")
endif()
list(APPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")
CFG
cat > .deps/lib/cmake/benchmark/benchmarkConfig.cmake <<'CFG'
if(NOT TARGET benchmark::benchmark)
  add_library(benchmark::benchmark SHARED IMPORTED)
  file(GLOB _dsv4_benchmark_lib "${CMAKE_CURRENT_LIST_DIR}/../../libbenchmark.so.*.*")
  set_target_properties(benchmark::benchmark PROPERTIES
    IMPORTED_LOCATION "${_dsv4_benchmark_lib}"
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include"
    INTERFACE_LINK_LIBRARIES pthread)
endif()
CFG
du -sh .deps
