#include "verify/hdf5/type_info.h"

#include <fmt/format.h>

namespace dsv4::verify::hdf5 {

TypeInfo describe_type(hid_t type) {
  TypeInfo info;
  info.bytes = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      info.type_class = TypeClass::integer;
      info.is_signed = H5Tget_sign(type) == H5T_SGN_2;
      info.name = fmt::format("{}int{}", info.is_signed ? "" : "u", 8 * info.bytes);
      break;
    case H5T_FLOAT:
      info.type_class = TypeClass::floating;
      info.name = fmt::format("float{}", 8 * info.bytes);
      break;
    case H5T_STRING:
      info.type_class = TypeClass::string;
      info.variable_length = H5Tis_variable_str(type) > 0;
      info.name = info.variable_length ? "string (variable length)" : fmt::format("string ({} bytes)", info.bytes);
      break;
    case H5T_OPAQUE: info.name = fmt::format("opaque ({} bytes)", info.bytes); break;
    case H5T_COMPOUND: info.name = "compound"; break;
    case H5T_ENUM: info.name = "enum"; break;
    case H5T_ARRAY: info.name = "array"; break;
    case H5T_VLEN: info.name = "variable-length sequence"; break;
    case H5T_REFERENCE: info.name = "reference"; break;
    case H5T_BITFIELD: info.name = "bitfield"; break;
    case H5T_TIME: info.name = "time"; break;
    default: info.name = "unknown"; break;
  }
  return info;
}

}  // namespace dsv4::verify::hdf5
