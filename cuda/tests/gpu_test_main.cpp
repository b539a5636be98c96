// doctest main of the GPU tests: without a usable CUDA device it prints why and returns 77, which
// ctest's SKIP_RETURN_CODE reports as "Skipped" (never as a pass). Listing the cases (what ctest's
// discovery runs at build time) needs no device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

#include "cuda/common/cuda_check.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    listing |= a.starts_with("--list") || a.starts_with("-ltc") || a.starts_with("-lts") || a.starts_with("-h") ||
               a.starts_with("--help");
  }
  if (!listing && dsv4::cuda::device_count() == 0) {
    std::printf("no CUDA device: GPU tests skipped (exit code 77)\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
