// RMSNorm with weight (model.py RMSNorm) and the weightless per-head norm of q (docs/math.md "q"
// step 2). Each place where DeepSeek's code produces a tensor is one rounding here; the arithmetic
// of that one op is done in double.
#include "reference/primitives/rmsnorm.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "reference/parallel.h"

namespace dsv4::ref {

namespace {

// mean(v^2) over a span of doubles, accumulated in double (one reduction = one rounding later).
double mean_of_squares(const double* v, Index n) {
  double sum = 0;
  for (Index k = 0; k < n; ++k) sum += v[k] * v[k];
  return sum / static_cast<double>(n);
}

}  // namespace

// x [rows, n], weight [n] -> [rows, n]
// torch, in fp32 after x.float():  ms = mean(x^2);  r = rsqrt(ms + eps);  y = x * r;  out = w * y;
// then .to(in_dtype). Rounded: ms, ms + eps, r, y, w * y to fp32_tensors; out to activations.
Mat rms_norm(const Mat& x, const Vec& weight, double eps, const PrecisionPolicy& p) {
  const Index n = x.cols();
  if (weight.size() != n)
    throw std::invalid_argument("rms_norm: weight has " + std::to_string(weight.size()) +
                                " values, expected x.cols() = " + std::to_string(n));
  if (n == 0) throw std::invalid_argument("rms_norm: x has 0 columns, expected at least 1");
  const Storage f32 = p.fp32_tensors;
  Mat out(x.rows(), n);
  parallel_for(x.rows(), [&](int64_t row) {
    const double ms = round_to(f32, mean_of_squares(x.row(row).data(), n));
    const double r = round_to(f32, 1.0 / std::sqrt(round_to(f32, ms + eps)));
    for (Index k = 0; k < n; ++k) {
      const double y = round_to(f32, x(row, k) * r);
      out(row, k) = round_to(p.activations, round_to(f32, weight(k) * y));
    }
  });
  return out;
}

// x [rows, H*d] -> [rows, H*d]
// torch on a bf16 tensor q [.., H, d]: sq = q.square(); m = sq.mean(-1) (fp32 accumulate, bf16
// result); m + eps; rsqrt; q * r. Every one of those is a bf16 tensor: rounded to activations.
Mat head_rms_norm(const Mat& x, int n_heads, double eps, const PrecisionPolicy& p) {
  if (n_heads <= 0 || x.cols() % n_heads != 0)
    throw std::invalid_argument("head_rms_norm: x has " + std::to_string(x.cols()) +
                                " columns, expected a positive multiple of n_heads = " + std::to_string(n_heads));
  const Index d = x.cols() / n_heads;
  if (d == 0) throw std::invalid_argument("head_rms_norm: head dim is 0, expected at least 1");
  const Storage act = p.activations;
  Mat out(x.rows(), x.cols());
  parallel_for(x.rows(), [&](int64_t row) {
    for (int h = 0; h < n_heads; ++h) {
      const Index first = h * d;
      double sum_sq = 0;
      for (Index k = 0; k < d; ++k) {
        const double v = x(row, first + k);
        sum_sq += round_to(act, v * v);
      }
      const double mean = round_to(act, sum_sq / static_cast<double>(d));
      const double r = round_to(act, 1.0 / std::sqrt(round_to(act, mean + eps)));
      for (Index k = 0; k < d; ++k) out(row, first + k) = round_to(act, x(row, first + k) * r);
    }
  });
  return out;
}

}  // namespace dsv4::ref
