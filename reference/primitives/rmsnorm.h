#pragma once
// RMSNorm (model.py RMSNorm): y = w * x / sqrt(mean(x^2) + eps), computed in the policy's fp32
// storage and rounded to the activation storage.
#include "reference/precision.h"
#include "reference/tensor.h"

namespace dsv4::ref {

// x [rows, n], weight [n] -> [rows, n]
Mat rms_norm(const Mat& x, const Vec& weight, double eps, const PrecisionPolicy& p);

// The weightless per-head norm of q (model.py Attention.forward): x [rows, H*d] viewed as H heads
// of d; each head is scaled by rsqrt(mean(x^2) + eps). DeepSeek runs it as bf16 tensor ops:
// square -> act, mean -> act, + eps -> act, rsqrt -> act, multiply -> act (act = activation storage).
Mat head_rms_norm(const Mat& x, int n_heads, double eps, const PrecisionPolicy& p);

}  // namespace dsv4::ref
