#pragma once
// Shapes of compared tensors: row-major (C order, as HDF5 datasets and PyTorch buffers), so a flat
// index unravels into a coordinate with the last axis fastest.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dsv4::verify {

using Shape = std::vector<int64_t>;

// The number of elements of `shape` (1 for the empty shape, a scalar). Throws std::invalid_argument
// naming `what` when an extent is negative or the product overflows int64.
int64_t element_count(std::span<const int64_t> shape, const std::string& what);

// The coordinate of flat index `flat` in `shape`: flat = sum_k coord[k] * prod_{j>k} shape[j].
// Throws std::out_of_range when flat is outside [0, element_count(shape)).
std::vector<int64_t> unravel(int64_t flat, std::span<const int64_t> shape);

// "[2,3,4]": how shapes and coordinates appear in messages and reports.
std::string format_shape(std::span<const int64_t> shape);

}  // namespace dsv4::verify
