// libFuzzer target over the capture reader: any bytes, written to a file, must read as a Capture
// or fail with a CaptureError; anything else (a crash, a sanitizer report, another exception, a
// leak, an allocation past -rss_limit_mb) is a finding. How to build and run: docs/capture-format.md.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "verify/capture/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("dsv4-capture-fuzz-" + std::to_string(::getpid()) + ".h5")).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  // Small datasets only: a fuzzed shape may claim gigabytes of fill values.
  const dsv4::verify::ReadOptions options{.max_dataset_elements = int64_t{1} << 20};
  try {
    dsv4::verify::read_capture(path, options);
  } catch (const dsv4::verify::CaptureError&) {
  }
  return 0;
}
