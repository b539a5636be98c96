#pragma once
// Every CUDA runtime call is checked: a failure throws std::runtime_error naming the call, the file
// and line, and CUDA's own message. Kernel launches are followed by CUDA_CHECK_LAUNCH() (the launch
// error is only visible through cudaGetLastError).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace dsv4::cuda {

inline void check(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                             cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// Number of CUDA devices; 0 when the runtime finds no usable device (no driver, no GPU).
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace dsv4::cuda

#define CUDA_CHECK(call) ::dsv4::cuda::check((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH() ::dsv4::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
