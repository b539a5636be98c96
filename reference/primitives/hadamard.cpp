// Walsh-Hadamard rotation (model.py rotate_activation; docs/math.md "Hadamard").
#include "reference/primitives/hadamard.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "reference/parallel.h"

namespace dsv4::ref {

// x [rows, heads * n] -> same shape, each n-block transformed
// out = (x H^T) n^-1/2 with H[i][j] = (-1)^popcount(i & j). The fast transform's butterflies
// (a, b) -> (a + b, a - b) run in double: log2(n) additions per output, each off by at most 2^-53
// relative, far below the rounding to fp32_tensors (the kernel's fp32 result, whose own addition
// order is not knowable) and to activations (the bf16 tensor it returns).
Mat hadamard_rows(const Mat& x, int n, const PrecisionPolicy& p) {
  if (n <= 0 || (n & (n - 1)) != 0)
    throw std::invalid_argument("hadamard_rows: n = " + std::to_string(n) + ", expected a power of two");
  if (x.cols() % n != 0)
    throw std::invalid_argument("hadamard_rows: x has " + std::to_string(x.cols()) +
                                " columns, expected a multiple of n = " + std::to_string(n));
  const double scale = 1.0 / std::sqrt(static_cast<double>(n));
  const Index blocks = x.cols() / n;
  Mat out = x;
  parallel_for(out.rows(), [&](int64_t row) {
    double* r = out.row(row).data();
    for (Index b = 0; b < blocks; ++b) {
      double* v = r + b * n;
      // Butterfly stage with stride h pairs index i (bit h clear) with i + h (bit h set):
      // after all stages v[j] = sum_i (-1)^popcount(i & j) x[i].
      for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
          for (int k = i; k < i + h; ++k) {
            const double a = v[k];
            const double c = v[k + h];
            v[k] = a + c;
            v[k + h] = a - c;
          }
      for (int j = 0; j < n; ++j) v[j] = round_to(p.activations, round_to(p.fp32_tensors, v[j] * scale));
    }
  });
  return out;
}

}  // namespace dsv4::ref
