#include "verify/hdf5/group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "verify/hdf5/error.h"

namespace dsv4::verify::hdf5 {

namespace {

std::vector<std::string> split_path(const std::string& relative) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= relative.size()) {
    std::size_t end = relative.find('/', begin);
    if (end == std::string::npos) end = relative.size();
    if (end > begin) parts.push_back(relative.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

// The kind of the link `name` directly inside `location`, without following soft/external links.
Member::Kind link_kind(hid_t location, const std::string& name) {
  if (H5Lexists(location, name.c_str(), H5P_DEFAULT) <= 0) return Member::Kind::other;
  H5L_info_t link{};
  if (H5Lget_info(location, name.c_str(), &link, H5P_DEFAULT) < 0) return Member::Kind::other;
  if (link.type != H5L_TYPE_HARD) return Member::Kind::link;
  Handle object(H5Oopen(location, name.c_str(), H5P_DEFAULT), H5Oclose);
  if (!object) return Member::Kind::other;
  switch (H5Iget_type(object.get())) {
    case H5I_GROUP: return Member::Kind::group;
    case H5I_DATASET: return Member::Kind::dataset;
    default: return Member::Kind::other;
  }
}

}  // namespace

const char* describe(Member::Kind kind) {
  switch (kind) {
    case Member::Kind::group: return "a group";
    case Member::Kind::dataset: return "a dataset";
    case Member::Kind::link: return "a soft or external link (captures hold hard links only)";
    case Member::Kind::other: break;
  }
  return "nothing";
}

std::vector<Member> Group::members() const {
  H5G_info_t info{};
  check(H5Gget_info(id(), &info), file_, path_, "a readable group");
  std::vector<Member> members;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t length = check(H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT), file_,
                           path_, "a readable member name");
    std::string name(static_cast<std::size_t>(length) + 1, '\0');
    check(H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT), file_,
          path_, "a readable member name");
    name.resize(static_cast<std::size_t>(length));
    members.push_back({name, link_kind(id(), name)});
  }
  return members;
}

Member::Kind Group::kind_of(const std::string& relative) const {
  std::vector<std::string> parts = split_path(relative);
  if (parts.empty()) return Member::Kind::group;
  Handle current;  // empty while at this group
  for (std::size_t i = 0; i < parts.size(); ++i) {
    hid_t location = current ? current.get() : id();
    Member::Kind kind = link_kind(location, parts[i]);
    if (i + 1 == parts.size() || kind != Member::Kind::group) {
      return i + 1 == parts.size() ? kind : Member::Kind::other;
    }
    current = Handle(H5Gopen2(location, parts[i].c_str(), H5P_DEFAULT), H5Gclose);
    if (!current) return Member::Kind::other;
  }
  return Member::Kind::other;
}

Handle Group::open_object(const std::string& relative, Member::Kind want, const char* expected) const {
  std::string where = child_path(relative);
  Member::Kind kind = kind_of(relative);
  if (kind != want) throw Error(file_, where, expected, describe(kind));
  return Handle(check(H5Oopen(id(), relative.c_str(), H5P_DEFAULT), file_, where, expected), H5Oclose);
}

Group Group::group(const std::string& relative) const {
  return Group(open_object(relative, Member::Kind::group, "a group"), file_, child_path(relative));
}

Dataset Group::dataset(const std::string& relative) const {
  return Dataset(open_object(relative, Member::Kind::dataset, "a dataset"), file_, child_path(relative));
}

namespace {
Handle intermediate_groups_plist() {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return lcpl;
}
}  // namespace

Group Group::create_group(const std::string& relative) {
  std::string where = child_path(relative);
  if (kind_of(relative) == Member::Kind::group) return group(relative);
  Handle lcpl = intermediate_groups_plist();
  Handle g(check(H5Gcreate2(id(), relative.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), file_, where, "a new group"),
           H5Gclose);
  return Group(std::move(g), file_, where);
}

namespace {
template <typename T>
struct StoredAs;
template <>
struct StoredAs<float> {
  static hid_t file() { return H5T_IEEE_F32LE; }
  static hid_t memory() { return H5T_NATIVE_FLOAT; }
};
template <>
struct StoredAs<double> {
  static hid_t file() { return H5T_IEEE_F64LE; }
  static hid_t memory() { return H5T_NATIVE_DOUBLE; }
};
template <>
struct StoredAs<int32_t> {
  static hid_t file() { return H5T_STD_I32LE; }
  static hid_t memory() { return H5T_NATIVE_INT32; }
};
template <>
struct StoredAs<int64_t> {
  static hid_t file() { return H5T_STD_I64LE; }
  static hid_t memory() { return H5T_NATIVE_INT64; }
};

// Chunks of at most ~1 MiB: halve the leading dimensions until the chunk fits.
std::vector<hsize_t> chunk_shape(const std::vector<hsize_t>& dims, std::size_t element_bytes) {
  std::vector<hsize_t> chunk = dims;
  auto bytes = [&] {
    hsize_t n = element_bytes;
    for (hsize_t c : chunk) n *= c;
    return n;
  };
  for (hsize_t& c : chunk) {
    while (bytes() > (hsize_t{1} << 20) && c > 1) c = (c + 1) / 2;
  }
  return chunk;
}
}  // namespace

template <typename T>
Dataset Group::write(const std::string& relative, const std::vector<int64_t>& shape, std::span<const T> values,
                     const WriteOptions& options) {
  std::string where = child_path(relative);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hsize_t count = 1;
  for (hsize_t n : dims) count *= n;
  if (std::any_of(shape.begin(), shape.end(), [](int64_t n) { return n < 0; }) || count != values.size()) {
    throw Error(file_, where, fmt::format("values for shape [{}]", fmt::join(shape, ", ")),
                fmt::format("{} values", values.size()));
  }
  Handle space(
      check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), file_, where, "a dataspace"),
      H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (options.compress && count > 0) {
    std::vector<hsize_t> chunk = chunk_shape(dims, sizeof(T));
    check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), file_, where, "a chunk layout");
    check(H5Pset_shuffle(dcpl.get()), file_, where, "the shuffle filter");
    check(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options.gzip_level)), file_, where, "the gzip filter");
  }
  Handle lcpl = intermediate_groups_plist();
  Handle d(
      check(H5Dcreate2(id(), relative.c_str(), StoredAs<T>::file(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
            file_, where, "a new dataset"),
      H5Dclose);
  if (count > 0) {
    check(H5Dwrite(d.get(), StoredAs<T>::memory(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), file_, where,
          "written data");
  }
  return Dataset(std::move(d), file_, where);
}

template Dataset Group::write<float>(const std::string&, const std::vector<int64_t>&, std::span<const float>,
                                     const WriteOptions&);
template Dataset Group::write<double>(const std::string&, const std::vector<int64_t>&, std::span<const double>,
                                      const WriteOptions&);
template Dataset Group::write<int32_t>(const std::string&, const std::vector<int64_t>&, std::span<const int32_t>,
                                       const WriteOptions&);
template Dataset Group::write<int64_t>(const std::string&, const std::vector<int64_t>&, std::span<const int64_t>,
                                       const WriteOptions&);

void Group::remove(const std::string& relative) {
  check(H5Ldelete(id(), relative.c_str(), H5P_DEFAULT), file_, child_path(relative), "a removable member");
}

}  // namespace dsv4::verify::hdf5
