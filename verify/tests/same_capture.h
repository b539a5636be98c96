#pragma once
// Doctest CHECKs that two captures hold the same values bit for bit (-inf == -inf, -0.0 != 0.0):
// attributes, config, every layer's weights, linear kinds and calls, every stage tensor. path and
// notes are not compared (a capture written and read back has a new path and may gain notes).
#include <cstring>

#include "verify/capture/capture.h"

namespace dsv4::verify::testing {

void check_same(const Capture& a, const Capture& b);

// Two Eigen matrices of doubles hold the same values bit for bit; memcmp is not called on an empty
// one (its data() may be null).
template <typename M>
bool same_matrix(const M& a, const M& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * sizeof(double)) == 0);
}

}  // namespace dsv4::verify::testing
