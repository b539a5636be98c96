#pragma once
// One owned HDF5 identifier (file, group, dataset, attribute, dataspace, datatype, property list),
// closed with its own close function when the Handle goes away. Move-only.
#include <hdf5.h>

#include <utility>

namespace dsv4::verify::hdf5 {

class Handle {
 public:
  using Closer = herr_t (*)(hid_t);

  Handle() = default;
  Handle(hid_t id, Closer close) noexcept : id_(id), close_(close) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), close_(other.close_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      close_ = other.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }

  // Closes now; returns the close function's status (a failed close of a file being written
  // means the file is incomplete, so writers look at it).
  herr_t reset() noexcept {
    herr_t status = 0;
    if (id_ >= 0 && close_ != nullptr) status = close_(id_);
    id_ = H5I_INVALID_HID;
    return status;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

}  // namespace dsv4::verify::hdf5
