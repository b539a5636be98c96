#pragma once
// The checks a capture dataset must pass, each throwing CaptureError with the file, the dataset
// path, what was expected and what was found.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verify/capture/capture.h"
#include "verify/hdf5/type_info.h"

namespace dsv4::verify {

// "[1,8,256]"
std::string shape_text(std::span<const int64_t> shape);

// Where a dataset lives, for messages.
struct DatasetLocation {
  std::string file;
  std::string path;  // "/layers/3/calls/0/x"
};

// Float datasets must have a floating-point type; index datasets an integer type.
void check_value_type(const DatasetLocation& at, const hdf5::TypeInfo& type, bool is_index);
// expected shape "[b,s,dim] = [1,8,256]", found "[1,8,255]".
void check_shape(const DatasetLocation& at, std::span<const int64_t> found, std::span<const int64_t> expected,
                 std::string_view shape_doc);
// Refuses a dataset larger than `max_elements` before it is read.
void check_size(const DatasetLocation& at, int64_t elements, int64_t max_elements);
// The `dtype` attribute of a float dataset: bfloat16, float32 or float8_e4m3fn (float16 and float64
// are accepted too); of an index dataset: int32 or int64.
void check_dtype_name(const DatasetLocation& at, const std::string& dtype, bool is_index);
// Every value finite; with allow_minus_inf, -inf is allowed too. Names the first offender and its
// coordinate, and how many there are.
void check_finite(const DatasetLocation& at, const Tensor& t, bool allow_minus_inf);
// Every value -1 or in [0, rows).
void check_indices(const DatasetLocation& at, const Tensor& t, int64_t rows, std::string_view rows_doc);

}  // namespace dsv4::verify
