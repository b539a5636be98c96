#pragma once
// One dataset: its shape, its stored type, and its values read whole, in C (row-major) order.
// HDF5 converts on read, so float16/32/64 of either byte order read as double and every integer
// type reads as int64; chunked and gzip/shuffle-compressed storage is transparent.
#include <cstdint>
#include <vector>

#include "verify/hdf5/object.h"
#include "verify/hdf5/type_info.h"

namespace dsv4::verify::hdf5 {

template <typename T>
struct Array {
  std::vector<int64_t> shape;
  std::vector<T> values;  // row-major, product(shape) values
};

class Dataset : public Object {
 public:
  Dataset(Handle handle, std::string file, std::string path)
      : Object(std::move(handle), std::move(file), std::move(path)) {}

  std::vector<int64_t> shape() const;  // {} for a scalar
  TypeInfo type() const;
  // Product of the shape; throws Error when it does not fit in int64.
  int64_t element_count() const;

  // T = double: integer or float datasets. T = int64_t: integer datasets only (float values would
  // be truncated). Throws Error for other stored types, for filters this HDF5 lacks (e.g. lzf,
  // blosc), and for unreadable data.
  template <typename T>
  Array<T> read() const;

 private:
  void check_filters_available() const;
};

}  // namespace dsv4::verify::hdf5
