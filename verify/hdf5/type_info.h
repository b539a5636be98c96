#pragma once
// What a stored HDF5 datatype is, in the words error messages use: "float32", "int64", "string",
// "opaque (2 bytes)", ...
#include <hdf5.h>

#include <cstddef>
#include <string>

namespace dsv4::verify::hdf5 {

enum class TypeClass { integer, floating, string, other };

struct TypeInfo {
  TypeClass type_class = TypeClass::other;
  std::size_t bytes = 0;
  bool is_signed = false;        // integers
  bool variable_length = false;  // strings
  std::string name;              // "float32", "uint8", "string", "opaque (2 bytes)", "compound", ...
};

// Throws nothing: an unreadable type is described as "unknown".
TypeInfo describe_type(hid_t type);

}  // namespace dsv4::verify::hdf5
