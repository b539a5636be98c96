#include "verify/hdf5/object.h"

#include <fmt/format.h>

#include "verify/hdf5/error.h"

namespace dsv4::verify::hdf5 {

std::string Object::child_path(std::string_view relative) const {
  return path_ == "/" ? fmt::format("/{}", relative) : fmt::format("{}/{}", path_, relative);
}

std::string Object::attribute_where(const std::string& name) const {
  return fmt::format("{}: attribute '{}'", path_, name);
}

bool Object::has_attribute(const std::string& name) const {
  return check(H5Aexists(id(), name.c_str()), file_, attribute_where(name), "a readable attribute") > 0;
}

namespace {
herr_t collect_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> Object::attribute_names() const {
  std::vector<std::string> names;
  hsize_t position = 0;
  check(H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, &position, collect_name, &names), file_, path_,
        "a readable attribute list");
  return names;
}

Attribute Object::attribute(const std::string& name) const {
  std::string where = attribute_where(name);
  if (!has_attribute(name)) throw Error(file_, path_, fmt::format("attribute '{}'", name), "nothing");
  Handle a(check(H5Aopen(id(), name.c_str(), H5P_DEFAULT), file_, where, "a readable attribute"), H5Aclose);
  return Attribute(std::move(a), file_, std::move(where));
}

void Object::set_attribute(const std::string& name, const AttributeValue& value) {
  std::string where = attribute_where(name);
  if (has_attribute(name)) remove_attribute(name);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  auto write = [&](hid_t stored_type, hid_t memory_type, const void* data) {
    Handle a(check(H5Acreate2(id(), name.c_str(), stored_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), file_, where,
                   "a writable attribute"),
             H5Aclose);
    check(H5Awrite(a.get(), memory_type, data), file_, where, "a written attribute");
  };
  if (const auto* i = std::get_if<int64_t>(&value)) {
    write(H5T_STD_I64LE, H5T_NATIVE_INT64, i);
  } else if (const auto* d = std::get_if<double>(&value)) {
    write(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, d);
  } else {
    Handle text_type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(text_type.get(), H5T_VARIABLE);
    H5Tset_cset(text_type.get(), H5T_CSET_UTF8);
    const char* text = std::get<std::string>(value).c_str();
    write(text_type.get(), text_type.get(), &text);
  }
}

void Object::remove_attribute(const std::string& name) {
  check(H5Adelete(id(), name.c_str()), file_, attribute_where(name), "a removable attribute");
}

}  // namespace dsv4::verify::hdf5
