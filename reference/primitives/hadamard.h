#pragma once
// Natural-order (Sylvester) Walsh-Hadamard transform, H[i][j] = (-1)^popcount(i & j), scaled by
// n^-1/2 (model.py rotate_activation through fast_hadamard_transform): out = x H^T n^-1/2, in fp32
// storage, rounded to the activation storage. n must be a power of two.
#include "reference/precision.h"
#include "reference/tensor.h"

namespace dsv4::ref {

// x [rows, heads * n] -> same shape, each n-block transformed
Mat hadamard_rows(const Mat& x, int n, const PrecisionPolicy& p);

}  // namespace dsv4::ref
