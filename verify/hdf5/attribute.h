#pragma once
// One attribute of a group or dataset. Captures use scalar attributes only: numbers (any integer
// or float type, read as int64 or double) and strings of both HDF5 kinds (fixed-length, as numpy
// bytes give, and variable-length, as Python str gives; ASCII or UTF-8).
#include <cstdint>
#include <string>
#include <variant>

#include "verify/hdf5/handle.h"
#include "verify/hdf5/type_info.h"

namespace dsv4::verify::hdf5 {

using AttributeValue = std::variant<int64_t, double, std::string>;

class Attribute {
 public:
  Attribute(Handle handle, std::string file, std::string where)
      : handle_(std::move(handle)), file_(std::move(file)), where_(std::move(where)) {}

  // "<object path>: attribute '<name>'", the object named in error messages.
  const std::string& where() const { return where_; }
  TypeInfo type() const;

  // The value of a scalar (or one-element) attribute: int64 for integer types, double for float
  // types, the text for strings (fixed-length strings end at their first NUL, space-padded ones
  // lose the padding). Throws Error for other types and for more than one element.
  AttributeValue read() const;

 private:
  std::string read_string(hid_t stored_type) const;

  Handle handle_;
  std::string file_, where_;
};

// The value as text for messages: 4, 0.5, 'official'.
std::string to_string(const AttributeValue& value);

}  // namespace dsv4::verify::hdf5
