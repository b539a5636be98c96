#include "verify/hdf5/file.h"

#include <filesystem>

#include "verify/hdf5/error.h"

namespace dsv4::verify::hdf5 {

File::File(Handle file, Handle root, std::string path)
    : Group(std::move(root), path, "/"), file_handle_(std::move(file)) {}

File File::open(const std::string& path, Mode mode) {
  silence_library_errors();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw Error(path, "/", "an HDF5 file", std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  }
  htri_t signature = H5Fis_hdf5(path.c_str());
  if (signature == 0) throw Error(path, "/", "an HDF5 file", "a file without the HDF5 signature");
  check(signature, path, "/", "an HDF5 file");
  unsigned flags = mode == Mode::read_only ? H5F_ACC_RDONLY : H5F_ACC_RDWR;
  Handle file(check(H5Fopen(path.c_str(), flags, H5P_DEFAULT), path, "/", "a readable HDF5 file"), H5Fclose);
  Handle root(check(H5Gopen2(file.get(), "/", H5P_DEFAULT), path, "/", "a root group"), H5Gclose);
  return File(std::move(file), std::move(root), path);
}

File File::create(const std::string& path) {
  silence_library_errors();
  Handle file(
      check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), path, "/", "a writable new HDF5 file"),
      H5Fclose);
  Handle root(check(H5Gopen2(file.get(), "/", H5P_DEFAULT), path, "/", "a root group"), H5Gclose);
  return File(std::move(file), std::move(root), path);
}

void File::close() {
  handle_.reset();
  if (file_handle_.reset() < 0) {
    throw Error(file_, "/", "a completely written file", "HDF5 error: " + library_message());
  }
}

}  // namespace dsv4::verify::hdf5
