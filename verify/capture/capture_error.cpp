#include "verify/capture/capture_error.h"

#include <fmt/format.h>

namespace dsv4::verify {

CaptureError::CaptureError(std::string file, std::string object, std::string expected, std::string found)
    : std::runtime_error(fmt::format("{}: {}: expected {}, found {}", file, object, expected, found)),
      file_(std::move(file)),
      object_(std::move(object)),
      expected_(std::move(expected)),
      found_(std::move(found)) {}

}  // namespace dsv4::verify
