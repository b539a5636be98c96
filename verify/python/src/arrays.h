#pragma once
// Arrays across the Python boundary. Inputs arrive as C-contiguous CPU float64 / int32 arrays
// (nanobind converts other dtypes and orders through the array's own framework; the Python layer
// copies CUDA tensors to the host first, dsv4_oracle/_arrays.py). Outputs are NumPy arrays that own
// the oracle's buffers (no copy).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "reference/tensor.h"

namespace dsv4::python {

namespace nb = nanobind;

using In1 = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using In2 = nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using InAny = nb::ndarray<const double, nb::c_contig, nb::device::cpu>;
using InIndex2 = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using InIndexAny = nb::ndarray<const int64_t, nb::c_contig, nb::device::cpu>;
using InBytes = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;

template <typename T>
using Out = nb::ndarray<nb::numpy, T>;

inline ref::Mat to_mat(const In2& a) {
  return Eigen::Map<const ref::Mat>(a.data(), static_cast<ref::Index>(a.shape(0)), static_cast<ref::Index>(a.shape(1)));
}
inline ref::Vec to_vec(const In1& a) {
  return Eigen::Map<const ref::Vec>(a.data(), static_cast<ref::Index>(a.shape(0)));
}
inline ref::IndexMat to_index_mat(const InIndex2& a) {
  return Eigen::Map<const ref::IndexMat>(a.data(), static_cast<ref::Index>(a.shape(0)),
                                         static_cast<ref::Index>(a.shape(1)));
}
inline std::vector<int64_t> shape_of(const auto& a) {
  std::vector<int64_t> s;
  for (size_t i = 0; i < a.ndim(); ++i) s.push_back(static_cast<int64_t>(a.shape(i)));
  return s;
}

// A heap object handed to NumPy: the array views its data and frees it with the array.
template <typename T, typename Holder>
Out<T> own(Holder&& holder, std::vector<size_t> shape) {
  auto* heap = new std::decay_t<Holder>(std::forward<Holder>(holder));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::decay_t<Holder>*>(p); });
  return Out<T>(const_cast<T*>(heap->data()), shape.size(), shape.data(), owner);
}

inline Out<double> out(ref::Mat m) {
  const size_t rows = static_cast<size_t>(m.rows()), cols = static_cast<size_t>(m.cols());
  return own<double>(std::move(m), {rows, cols});
}
inline Out<double> out(ref::Vec v) {
  const size_t n = static_cast<size_t>(v.size());
  return own<double>(std::move(v), {n});
}
inline Out<double> out_row(const Eigen::RowVectorXd& v) { return out(ref::Vec(v.transpose())); }
inline Out<int32_t> out(ref::IndexMat m) {
  const size_t rows = static_cast<size_t>(m.rows()), cols = static_cast<size_t>(m.cols());
  return own<int32_t>(std::move(m), {rows, cols});
}
template <typename T>
Out<T> out(std::vector<T> v, std::vector<size_t> shape) {
  return own<T>(std::move(v), std::move(shape));
}
template <typename T>
Out<T> out(std::vector<T> v) {
  const size_t n = v.size();
  return own<T>(std::move(v), {n});
}

}  // namespace dsv4::python
