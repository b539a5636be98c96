#pragma once
// a . b summed in a fixed order (four interleaved partial sums, then a fixed pairwise combine), so
// a score or logit never depends on where its operands sit in memory or on the shape of the call.
#include "reference/tensor.h"

namespace dsv4::ref {

inline double fixed_order_dot(const double* a, const double* b, Index n) {
  double part[4] = {0, 0, 0, 0};
  Index k = 0;
  for (; k + 4 <= n; k += 4)
    for (int l = 0; l < 4; ++l) part[l] += a[k + l] * b[k + l];
  for (; k < n; ++k) part[0] += a[k] * b[k];
  return (part[0] + part[1]) + (part[2] + part[3]);
}

}  // namespace dsv4::ref
