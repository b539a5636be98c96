# dsv4_find_cuda_toolkit([args of find_package]): find_package(CUDAToolkit ...) that also works with
# the FindCUDAToolkit module of CMake 3.25.0 and 3.25.1 (Debian 12's cmake) and CUDA 13.
#
# CUDA 13 ships no libnvToolsExt, so the module creates no CUDA::nvToolsExt target; the 3.25.0/1
# module then still sets a DEPRECATION property on that target whenever the calling project's
# cmake_minimum_required is 3.25 or more, a configure error ("set_property could not find TARGET
# CUDA::nvToolsExt"). Later modules check that the target exists first. The minimum-version variable
# is lowered for the duration of the call only: in FindCUDAToolkit it guards nothing but that
# deprecation notice, on a target this project never links. Policies are not read from the variable
# (cmake_minimum_required set them), so nothing else changes. A macro, so that the module's results
# (CUDAToolkit_FOUND, CUDAToolkit_VERSION, ...) land in the caller's scope as find_package's would.
# Used by cuda/CMakeLists.txt and by the installed package configuration (dsv4_oracleConfig.cmake).
macro(dsv4_find_cuda_toolkit)
  set(_dsv4_minimum_required_version "${CMAKE_MINIMUM_REQUIRED_VERSION}")
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  find_package(CUDAToolkit ${ARGN})
  set(CMAKE_MINIMUM_REQUIRED_VERSION "${_dsv4_minimum_required_version}")
  unset(_dsv4_minimum_required_version)
endmacro()
