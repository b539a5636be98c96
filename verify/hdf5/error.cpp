#include "verify/hdf5/error.h"

#include <fmt/format.h>

namespace dsv4::verify::hdf5 {

Error::Error(std::string file, std::string object, std::string expected, std::string found)
    : std::runtime_error(fmt::format("{}: {}: expected {}, found {}", file, object, expected, found)),
      file_(std::move(file)),
      object_(std::move(object)),
      expected_(std::move(expected)),
      found_(std::move(found)) {}

void silence_library_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {
// H5Ewalk2 callback: walking downward, the last record is the innermost one.
herr_t keep_innermost(unsigned /*n*/, const H5E_error2_t* record, void* out) {
  auto& message = *static_cast<std::string*>(out);
  if (record->desc != nullptr && record->desc[0] != '\0') {
    message = record->desc;
  } else {
    char minor[256] = {};
    if (H5Eget_msg(record->min_num, nullptr, minor, sizeof minor) > 0) message = minor;
  }
  return 0;
}
}  // namespace

std::string library_message() {
  std::string message;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &message);
  return message.empty() ? "unknown HDF5 failure" : message;
}

}  // namespace dsv4::verify::hdf5
