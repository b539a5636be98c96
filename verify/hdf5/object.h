#pragma once
// What groups and datasets share: the file they live in, their path (for messages), and their
// attributes.
#include <string>
#include <string_view>
#include <vector>

#include "verify/hdf5/attribute.h"
#include "verify/hdf5/handle.h"

namespace dsv4::verify::hdf5 {

class Object {
 public:
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }  // "/layers/3/calls/0/x"
  hid_t id() const { return handle_.get(); }

  bool has_attribute(const std::string& name) const;
  std::vector<std::string> attribute_names() const;
  // Throws Error ("expected attribute, found nothing") when absent.
  Attribute attribute(const std::string& name) const;
  // Scalar attribute: int64, float64, or a variable-length UTF-8 string (as h5py writes str).
  // Replaces an attribute of the same name.
  void set_attribute(const std::string& name, const AttributeValue& value);
  void remove_attribute(const std::string& name);

  // "<path>: attribute '<name>'", the object named in attribute errors.
  std::string attribute_where(const std::string& name) const;

 protected:
  Object(Handle handle, std::string file, std::string path)
      : handle_(std::move(handle)), file_(std::move(file)), path_(std::move(path)) {}
  std::string child_path(std::string_view relative) const;

  Handle handle_;
  std::string file_, path_;
};

}  // namespace dsv4::verify::hdf5
