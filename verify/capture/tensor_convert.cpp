#include "verify/capture/tensor_convert.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace dsv4::verify {

namespace {

std::string text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

int64_t product(const std::vector<int64_t>& shape, std::size_t from) {
  int64_t n = 1;
  for (std::size_t k = from; k < shape.size(); ++k) n *= shape[k];
  return n;
}

void require_consistent(const Tensor& t, const char* what) {
  if (static_cast<int64_t>(t.values.size()) != t.numel()) {
    throw std::invalid_argument(
        fmt::format("{}: tensor of shape {} holds {} values", what, text(t.shape), t.values.size()));
  }
}

int32_t to_index(double v, const char* what) {
  if (!(v == std::floor(v) && v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max())) {
    throw std::invalid_argument(fmt::format("{}: expected int32 index values, found {}", what, v));
  }
  return static_cast<int32_t>(v);
}

template <typename M, typename Convert>
std::vector<M> split_batch(const Tensor& t, const char* what, Convert convert) {
  require_consistent(t, what);
  if (t.shape.size() < 2)
    throw std::invalid_argument(fmt::format("{}: expected a tensor [b, n, ...], found shape {}", what, text(t.shape)));
  const int64_t rows = t.shape[1], cols = product(t.shape, 2);
  std::vector<M> mats;
  for (int64_t b = 0; b < t.shape[0]; ++b) {
    M m(rows, cols);
    const double* src = t.values.data() + b * rows * cols;
    for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = convert(src[i]);
    mats.push_back(std::move(m));
  }
  return mats;
}

template <typename M>
Tensor join_batch(const std::vector<M>& mats, std::vector<int64_t> shape, const char* what) {
  if (shape.size() < 2 || static_cast<int64_t>(mats.size()) != shape[0]) {
    throw std::invalid_argument(fmt::format("{}: {} matrices for shape {}", what, mats.size(), text(shape)));
  }
  const int64_t rows = shape[1], cols = product(shape, 2);
  Tensor t;
  t.shape = std::move(shape);
  t.values.reserve(static_cast<std::size_t>(t.numel()));
  for (const M& m : mats) {
    if (m.rows() != rows || m.cols() != cols) {
      throw std::invalid_argument(fmt::format("{}: matrix [{},{}] for shape {} (expected [{},{}])", what, m.rows(),
                                              m.cols(), text(t.shape), rows, cols));
    }
    for (ref::Index i = 0; i < m.size(); ++i) t.values.push_back(static_cast<double>(m.data()[i]));
  }
  return t;
}

}  // namespace

std::vector<ref::Mat> to_mats(const Tensor& t) {
  return split_batch<ref::Mat>(t, "to_mats", [](double v) { return v; });
}

std::vector<ref::IndexMat> to_index_mats(const Tensor& t) {
  return split_batch<ref::IndexMat>(t, "to_index_mats", [](double v) { return to_index(v, "to_index_mats"); });
}

Tensor from_mats(const std::vector<ref::Mat>& mats, std::vector<int64_t> shape, std::string dtype) {
  Tensor t = join_batch(mats, std::move(shape), "from_mats");
  t.dtype = std::move(dtype);
  return t;
}

Tensor from_index_mats(const std::vector<ref::IndexMat>& mats, std::vector<int64_t> shape) {
  Tensor t = join_batch(mats, std::move(shape), "from_index_mats");
  t.is_index = true;
  t.dtype = "int32";
  return t;
}

std::vector<ref::CompressorState> to_compressor_states(const Tensor& kv, const Tensor& score, int ratio, int head_dim) {
  const int coff = ratio == 4 ? 2 : 1;
  const std::vector<int64_t> state{coff * int64_t{ratio}, coff * int64_t{head_dim}};
  for (const Tensor* t : {&kv, &score}) {
    if (t->shape.size() != 3 || t->shape[1] != state[0] || t->shape[2] != state[1] || t->shape[0] != kv.shape[0]) {
      throw std::invalid_argument(
          fmt::format("to_compressor_states: expected [b,{},{}] for ratio {} and head dim {}, found {}", state[0],
                      state[1], ratio, head_dim, text(t->shape)));
    }
  }
  std::vector<ref::Mat> kvs = to_mats(kv), scores = to_mats(score);
  std::vector<ref::CompressorState> states;
  for (std::size_t b = 0; b < kvs.size(); ++b)
    states.push_back({ratio, head_dim, std::move(kvs[b]), std::move(scores[b])});
  return states;
}

ref::Mat to_mat(const Tensor& t) {
  require_consistent(t, "to_mat");
  if (t.shape.size() != 2)
    throw std::invalid_argument(fmt::format("to_mat: expected a tensor [rows, cols], found shape {}", text(t.shape)));
  return Eigen::Map<const ref::Mat>(t.values.data(), t.shape[0], t.shape[1]);
}

ref::Vec to_vec(const Tensor& t) {
  require_consistent(t, "to_vec");
  if (t.shape.size() != 1)
    throw std::invalid_argument(fmt::format("to_vec: expected a tensor [n], found shape {}", text(t.shape)));
  return Eigen::Map<const ref::Vec>(t.values.data(), t.shape[0]);
}

Tensor weight_tensor(const ref::Mat& m) {
  Tensor t;
  t.shape = {m.rows(), m.cols()};
  t.values.assign(m.data(), m.data() + m.size());
  return t;
}

Tensor weight_tensor(const ref::Vec& v) {
  Tensor t;
  t.shape = {v.size()};
  t.values.assign(v.data(), v.data() + v.size());
  return t;
}

}  // namespace dsv4::verify
