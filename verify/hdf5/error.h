#pragma once
// HDF5 failures as exceptions. Every message is one line naming the file, the object inside it,
// what was expected and what was found, e.g.
//   run.h5: /layers/3/calls/0/x: expected a dataset, found nothing
//   run.h5: /: expected an HDF5 file, found HDF5 error: truncated file: eof = 96, ... stored_eof = 4096
#include <hdf5.h>

#include <stdexcept>
#include <string>

namespace dsv4::verify::hdf5 {

class Error : public std::runtime_error {
 public:
  Error(std::string file, std::string object, std::string expected, std::string found);
  const std::string& file() const { return file_; }
  const std::string& object() const { return object_; }
  const std::string& expected() const { return expected_; }
  const std::string& found() const { return found_; }

 private:
  std::string file_, object_, expected_, found_;
};

// Stops HDF5 from printing its error stack to stderr (failures become exceptions instead).
void silence_library_errors();

// The innermost message on HDF5's current error stack (where the failure was first detected),
// e.g. "file signature not found"; "unknown HDF5 failure" when the stack is empty.
std::string library_message();

// Returns `status` when it is >= 0 (hid_t or herr_t or htri_t); otherwise throws
// Error(file, object, expected, "HDF5 error: " + library_message()).
template <typename Status>
Status check(Status status, const std::string& file, const std::string& object, const std::string& expected) {
  if (status < 0) throw Error(file, object, expected, "HDF5 error: " + library_message());
  return status;
}

}  // namespace dsv4::verify::hdf5
