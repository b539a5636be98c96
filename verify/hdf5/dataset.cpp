#include "verify/hdf5/dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>

#include "verify/hdf5/error.h"

namespace dsv4::verify::hdf5 {

std::vector<int64_t> Dataset::shape() const {
  Handle space(check(H5Dget_space(id()), file_, path_, "a readable dataset shape"), H5Sclose);
  int rank = check(H5Sget_simple_extent_ndims(space.get()), file_, path_, "a simple dataspace");
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

TypeInfo Dataset::type() const {
  Handle t(check(H5Dget_type(id()), file_, path_, "a readable dataset type"), H5Tclose);
  return describe_type(t.get());
}

int64_t Dataset::element_count() const {
  std::vector<int64_t> dims = shape();
  int64_t count = 1;
  for (int64_t n : dims) {
    if (n != 0 && count > std::numeric_limits<int64_t>::max() / n) {
      throw Error(file_, path_, "a dataset whose element count fits in int64",
                  fmt::format("shape [{}]", fmt::join(dims, ", ")));
    }
    count *= n;
  }
  return count;
}

void Dataset::check_filters_available() const {
  Handle plist(check(H5Dget_create_plist(id()), file_, path_, "readable storage properties"), H5Pclose);
  int n = check(H5Pget_nfilters(plist.get()), file_, path_, "a readable filter pipeline");
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t n_values = 0;
    char name[64] = {};
    H5Z_filter_t filter =
        H5Pget_filter2(plist.get(), static_cast<unsigned>(i), &flags, &n_values, nullptr, sizeof name, name, &config);
    if (filter < 0 || H5Zfilter_avail(filter) <= 0) {
      throw Error(file_, path_, "compression this HDF5 can decode (gzip, shuffle, szip, fletcher32, nbit, scaleoffset)",
                  fmt::format("filter {} '{}', which is not available", static_cast<int>(filter), name));
    }
  }
}

template <typename T>
Array<T> Dataset::read() const {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, int64_t>);
  TypeInfo info = type();
  bool readable =
      info.type_class == TypeClass::integer || (std::is_same_v<T, double> && info.type_class == TypeClass::floating);
  if (!readable) {
    throw Error(file_, path_, std::is_same_v<T, double> ? "a numeric dataset" : "an integer dataset", info.name);
  }
  check_filters_available();
  Array<T> array{shape(), {}};
  array.values.resize(static_cast<std::size_t>(element_count()));
  if (array.values.empty()) return array;
  hid_t memory_type = std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
  check(H5Dread(id(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, array.values.data()), file_, path_, "readable data");
  return array;
}

template Array<double> Dataset::read<double>() const;
template Array<int64_t> Dataset::read<int64_t>() const;

}  // namespace dsv4::verify::hdf5
