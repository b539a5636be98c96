#pragma once
// An HDF5 file, which is also its root group "/". Opening checks, in order, that the path exists,
// that it carries the HDF5 signature, and that HDF5 can open it (a truncated file fails here), and
// says which of the three failed.
#include <string>

#include "verify/hdf5/group.h"
#include "verify/hdf5/handle.h"

namespace dsv4::verify::hdf5 {

class File : public Group {
 public:
  enum class Mode { read_only, read_write };

  static File open(const std::string& path, Mode mode = Mode::read_only);
  static File create(const std::string& path);  // replaces an existing file

  // Closes the file now; throws Error when HDF5 cannot finish writing it. Objects opened from the
  // file must be gone by then (they keep it open otherwise).
  void close();

 private:
  File(Handle file, Handle root, std::string path);
  Handle file_handle_;
};

}  // namespace dsv4::verify::hdf5
