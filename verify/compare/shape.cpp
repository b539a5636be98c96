#include "verify/compare/shape.h"

#include <limits>
#include <stdexcept>

namespace dsv4::verify {

int64_t element_count(std::span<const int64_t> shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t extent : shape) {
    if (extent < 0) {
      throw std::invalid_argument(what + ": shape " + format_shape(shape) + " has a negative extent");
    }
    if (extent != 0 && n > std::numeric_limits<int64_t>::max() / extent) {
      throw std::invalid_argument(what + ": shape " + format_shape(shape) + " has more than 2^63 elements");
    }
    n *= extent;
  }
  return n;
}

std::vector<int64_t> unravel(int64_t flat, std::span<const int64_t> shape) {
  const int64_t n = element_count(shape, "unravel");
  if (flat < 0 || flat >= n) {
    throw std::out_of_range("unravel: flat index " + std::to_string(flat) + " outside [0, " + std::to_string(n) +
                            ") of shape " + format_shape(shape));
  }
  std::vector<int64_t> coord(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    coord[k] = flat % shape[k];
    flat /= shape[k];
  }
  return coord;
}

std::string format_shape(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k) s += ',';
    s += std::to_string(shape[k]);
  }
  s += ']';
  return s;
}

}  // namespace dsv4::verify
