#include "verify/capture/dataset_checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "verify/capture/capture_error.h"

namespace dsv4::verify {

std::string shape_text(std::span<const int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

namespace {

// The coordinate of row-major element `flat` of `shape`.
std::vector<int64_t> coordinate(int64_t flat, std::span<const int64_t> shape) {
  std::vector<int64_t> coord(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    coord[k] = flat % shape[k];
    flat /= shape[k];
  }
  return coord;
}

// The first value failing `ok` as "<value> at [i,j,k] (n values)", or "" when all pass.
template <typename Ok>
std::string first_failure(const Tensor& t, Ok ok) {
  auto bad = std::find_if_not(t.values.begin(), t.values.end(), ok);
  if (bad == t.values.end()) return "";
  int64_t count = std::count_if(bad, t.values.end(), [&](double v) { return !ok(v); });
  int64_t flat = bad - t.values.begin();
  double v = *bad;
  std::string value = t.is_index ? fmt::format("{}", static_cast<int64_t>(v)) : fmt::format("{}", v);
  return fmt::format("{} at {} ({} such value{})", value, shape_text(coordinate(flat, t.shape)), count,
                     count == 1 ? "" : "s");
}

}  // namespace

void check_value_type(const DatasetLocation& at, const hdf5::TypeInfo& type, bool is_index) {
  if (is_index && type.type_class != hdf5::TypeClass::integer) {
    throw CaptureError(at.file, at.path, "an integer dataset (int32 or int64 indices)", type.name);
  }
  if (!is_index && type.type_class != hdf5::TypeClass::floating) {
    std::string hint =
        type.name.starts_with("opaque") ? " (store bfloat16 values as float32 with attr dtype = 'bfloat16')" : "";
    throw CaptureError(at.file, at.path, "a floating-point dataset (float32)", type.name + hint);
  }
}

void check_shape(const DatasetLocation& at, std::span<const int64_t> found, std::span<const int64_t> expected,
                 std::string_view shape_doc) {
  if (!std::equal(found.begin(), found.end(), expected.begin(), expected.end())) {
    throw CaptureError(at.file, at.path, fmt::format("shape {} = {}", shape_doc, shape_text(expected)),
                       shape_text(found));
  }
}

void check_size(const DatasetLocation& at, int64_t elements, int64_t max_elements) {
  if (elements > max_elements) {
    throw CaptureError(at.file, at.path,
                       fmt::format("at most {} elements (ReadOptions::max_dataset_elements)", max_elements),
                       fmt::format("{} elements", elements));
  }
}

void check_dtype_name(const DatasetLocation& at, const std::string& dtype, bool is_index) {
  static constexpr std::string_view float_names[] = {"bfloat16", "float32", "float8_e4m3fn", "float16", "float64"};
  static constexpr std::string_view index_names[] = {"int32", "int64"};
  std::span<const std::string_view> allowed =
      is_index ? std::span<const std::string_view>(index_names) : std::span<const std::string_view>(float_names);
  if (std::find(allowed.begin(), allowed.end(), dtype) == allowed.end()) {
    throw CaptureError(at.file, at.path + ": attribute 'dtype'", fmt::format("one of {}", fmt::join(allowed, ", ")),
                       fmt::format("'{}'", dtype));
  }
}

void check_finite(const DatasetLocation& at, const Tensor& t, bool allow_minus_inf) {
  std::string bad = first_failure(t, [&](double v) { return std::isfinite(v) || (allow_minus_inf && v == -INFINITY); });
  if (!bad.empty()) {
    throw CaptureError(at.file, at.path, allow_minus_inf ? "finite values or -inf" : "finite values", bad);
  }
}

void check_indices(const DatasetLocation& at, const Tensor& t, int64_t rows, std::string_view rows_doc) {
  std::string bad = first_failure(t, [&](double v) { return v == -1 || (v >= 0 && v < static_cast<double>(rows)); });
  if (!bad.empty()) {
    throw CaptureError(at.file, at.path, fmt::format("-1 or an index in [0,{}) ({})", rows, rows_doc), bad);
  }
}

}  // namespace dsv4::verify
