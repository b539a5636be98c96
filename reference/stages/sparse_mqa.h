#pragma once
// Shared-KV sparse multi-query attention with an attention sink (kernel.py sparse_attn;
// docs/math.md "sparse attention"). For each query token and head h:
//   s_j = scale * q_h . kv[idx_j]  over the valid indices (idx != -1),  M = max_j s_j,
//   o_h = sum_j e^(s_j - M) kv[idx_j] / (sum_j e^(s_j - M) + e^(sink_h - M)).
// The sink enters the denominator only (a logit with a zero value vector) and not the max.
// A row with no valid index gives 0.
#include "reference/precision.h"
#include "reference/tensor.h"

namespace dsv4::ref {

// q [s, H*d], kv [n, d], sink [H], indices [s, K] (-1 = skip) -> [s, H*d]
// Throws std::out_of_range for an index outside [-1, n).
Mat sparse_mqa(const Mat& q, const Mat& kv, const Vec& sink, const IndexMat& indices, int n_heads,
               double softmax_scale, const PrecisionPolicy& p);

}  // namespace dsv4::ref
