#!/usr/bin/env bash
# Configures this project against the unpatched FindCUDAToolkit module of Debian 12's CMake 3.25.1
# (package cmake-data 3.25.1-1): the module a user of stock Debian 12 + CUDA 13 gets, which
# machines with a patched copy in /usr/share/cmake-3.25 would hide. Passes when the configure
# succeeds with that module, the module's nvToolsExt deprecation branch was evaluated, and the CUDA
# part was configured.
#
# usage: configure_with_stock_find_cuda_toolkit.sh SOURCE_DIR WORK_DIR DEB CUDA_COMPILER
#   DEB: the cmake-data_3.25.1-1_all.deb that scripts/install-deps.sh downloads; when it is absent,
#        it is downloaded here with apt-get.
#   CUDA_COMPILER: the nvcc the enclosing build found ("" or *-NOTFOUND: exit 77, skipped).
# Exit status: 0 pass, 1 fail, 77 skipped (no nvcc: the CUDA part would not be configured at all).
set -euo pipefail
source_dir=$1 work_dir=$2 deb=$3 cuda_compiler=$4
package=cmake-data version=3.25.1-1
modules_in_deb=./usr/share/cmake-3.25/Modules

if [[ -z $cuda_compiler || $cuda_compiler == *-NOTFOUND ]]; then
  echo "skipped: the build found no nvcc, so the project configures without FindCUDAToolkit"
  exit 77
fi

rm -rf "$work_dir"
mkdir -p "$work_dir/module"
if [[ ! -f $deb ]]; then
  echo "$deb is absent (scripts/install-deps.sh downloads it): apt-get download $package=$version"
  if ! (cd "$work_dir" && apt-get download -q "$package=$version" 2>&1); then
    echo "FAIL: cannot download $package $version (run scripts/install-deps.sh as root, which runs apt-get update)"
    exit 1
  fi
  deb="$work_dir/${package}_${version}_all.deb"
fi
# The module and the two it includes by its own directory (the rest come from the running CMake).
for file in FindCUDAToolkit FindPackageHandleStandardArgs FindPackageMessage; do
  dpkg-deb --fsys-tarfile "$deb" | tar -x -O "$modules_in_deb/$file.cmake" >"$work_dir/module/$file.cmake"
done
module="$work_dir/module/FindCUDAToolkit.cmake"

# The copy must be the broken one, else this test proves nothing: the deprecation notice is set on
# CUDA::nvToolsExt without checking that the target exists.
if ! grep -A1 -x '    if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)' "$module" |
    grep -q 'set_property(TARGET CUDA::nvToolsExt PROPERTY DEPRECATION'; then
  echo "FAIL: $module is not the unpatched 3.25.1 module (no unguarded set_property on CUDA::nvToolsExt)"
  exit 1
fi
line=$(grep -n -x '    if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)' "$module" | cut -d: -f1)

# Configure only (no build): the benchmarks are left out to save time; the CUDA part is in.
status=0
cmake -S "$source_dir" -B "$work_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_MODULE_PATH="$work_dir/module" -DCMAKE_CUDA_COMPILER="$cuda_compiler" -DDSV4_BUILD_BENCH=OFF \
  --trace-source="$module" --trace-redirect="$work_dir/trace.txt" >"$work_dir/configure.log" 2>&1 || status=$?
if ((status != 0)); then
  cat "$work_dir/configure.log"
  echo "FAIL: configuring with the stock CMake 3.25.1 FindCUDAToolkit module failed (exit $status)"
  exit 1
fi
if ! grep -q "FindCUDAToolkit.cmake($line):" "$work_dir/trace.txt"; then
  echo "FAIL: the configure never evaluated $module line $line (the module was not used, or not that branch)"
  exit 1
fi
if [[ ! -f $work_dir/build/cuda/cmake_install.cmake ]]; then
  echo "FAIL: the CUDA part (cuda/) was not configured"
  exit 1
fi
echo "configured with the stock FindCUDAToolkit of $package $version (its line $line evaluated), CUDA part included"
