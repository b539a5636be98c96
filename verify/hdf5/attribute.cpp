#include "verify/hdf5/attribute.h"

#include <fmt/format.h>

#include "verify/hdf5/error.h"

namespace dsv4::verify::hdf5 {

TypeInfo Attribute::type() const {
  Handle t(check(H5Aget_type(handle_.get()), file_, where_, "a readable attribute type"), H5Tclose);
  return describe_type(t.get());
}

AttributeValue Attribute::read() const {
  Handle stored(check(H5Aget_type(handle_.get()), file_, where_, "a readable attribute type"), H5Tclose);
  TypeInfo info = describe_type(stored.get());
  Handle space(check(H5Aget_space(handle_.get()), file_, where_, "a readable attribute shape"), H5Sclose);
  hssize_t count = H5Sget_simple_extent_npoints(space.get());
  if (count != 1) {
    throw Error(file_, where_, "a single value", fmt::format("{} values of type {}", count < 0 ? 0 : count, info.name));
  }
  switch (info.type_class) {
    case TypeClass::integer: {
      int64_t v = 0;
      check(H5Aread(handle_.get(), H5T_NATIVE_INT64, &v), file_, where_, "a readable integer");
      return v;
    }
    case TypeClass::floating: {
      double v = 0;
      check(H5Aread(handle_.get(), H5T_NATIVE_DOUBLE, &v), file_, where_, "a readable float");
      return v;
    }
    case TypeClass::string: return read_string(stored.get());
    case TypeClass::other: break;
  }
  throw Error(file_, where_, "a number or a string", info.name);
}

std::string Attribute::read_string(hid_t stored_type) const {
  Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(memory.get(), H5Tget_cset(stored_type));
  if (H5Tis_variable_str(stored_type) > 0) {
    check(H5Tset_size(memory.get(), H5T_VARIABLE), file_, where_, "a string type");
    char* text = nullptr;
    check(H5Aread(handle_.get(), memory.get(), &text), file_, where_, "a readable string");
    std::string value = text != nullptr ? text : "";
    H5free_memory(text);
    return value;
  }
  // A damaged file may declare any length: refuse before allocating it.
  constexpr std::size_t max_bytes = std::size_t{1} << 20;
  std::size_t bytes = H5Tget_size(stored_type);
  if (bytes > max_bytes) {
    throw Error(file_, where_, fmt::format("a string of at most {} bytes", max_bytes), fmt::format("{} bytes", bytes));
  }
  H5T_str_t padding = H5Tget_strpad(stored_type);
  check(H5Tset_size(memory.get(), bytes), file_, where_, "a string type");
  check(H5Tset_strpad(memory.get(), padding == H5T_STR_SPACEPAD ? H5T_STR_SPACEPAD : H5T_STR_NULLPAD), file_, where_,
        "a string type");
  std::string value(bytes, '\0');
  check(H5Aread(handle_.get(), memory.get(), value.data()), file_, where_, "a readable string");
  if (padding == H5T_STR_SPACEPAD) {
    value.erase(value.find_last_not_of(' ') + 1);
  } else {
    value.resize(value.find('\0') == std::string::npos ? value.size() : value.find('\0'));
  }
  return value;
}

std::string to_string(const AttributeValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
          return fmt::format("'{}'", v);
        } else {
          return fmt::format("{}", v);
        }
      },
      value);
}

}  // namespace dsv4::verify::hdf5
