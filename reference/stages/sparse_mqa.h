#pragma once
// Shared-KV sparse multi-query attention with an attention sink (kernel.py sparse_attn;
// docs/math.md "sparse attention"). For each query token and head h:
//   s_j = scale * q_h . kv[idx_j]  over the valid indices (idx != -1),  M = max_j s_j,
//   o_h = sum_j e^(s_j - M) kv[idx_j] / (sum_j e^(s_j - M) + e^(sink_h - M)).
// The sink enters the denominator only (a logit with a zero value vector) and not the max.
// A row with no valid index gives 0. Rounding follows p: logits f32(f32(scale) * f32(q.kv)),
// probabilities f32 rounded to p.attn_probs before P.V, sums in p.fp32_tensors, output in
// p.activations. With p.attn_online_blocks the slots are walked in blocks of 64 with a running max
// (kernel.py); a block without a valid index changes nothing (in DeepSeek's kernel such a block
// FIRST gives NaN, exp(-inf - -inf), which its window-first lists never produce). kv rows that no
// valid index references are never read.
#include <vector>

#include "reference/precision.h"
#include "reference/tensor.h"

namespace dsv4::ref {

// One valid slot of one head's softmax, as the oracle computed it.
struct SlotProbability {
  Index slot = 0;       // column of the token row's index list
  double logit = 0;     // s_j = f32(f32(scale) * f32(q_h . kv_j))
  double exponent = 0;  // f32(s_j - m) <= 0, m the running max after the slot's block
  double prob = 0;      // f32(e^exponent): the probability before its cast to p.attn_probs
  double carry = 1;     // the product of the fp32 rescales e^(m - m') applied to it after its block
};

// One head's softmax over one token row: what a verifier needs to bound how far a producer that
// follows the same convention (blocks of 64, running max, probabilities cast before P.V) may land
// (verify/tolerance/probability_flips.h).
struct HeadSoftmax {
  std::vector<SlotProbability> slots;  // the valid slots, in index order
  double denominator = 0;              // the final denominator, sink included
};

// q [s, H*d], kv [n, d], sink [H], indices [s, K] (-1 = skip) -> [s, H*d]
// Throws std::out_of_range for an index outside [-1, n).
Mat sparse_mqa(const Mat& q, const Mat& kv, const Vec& sink, const IndexMat& indices, int n_heads, double softmax_scale,
               const PrecisionPolicy& p);
// The output before its final rounding to p.activations: acc / denominator, of fp32 operands.
// softmax: when given, receives the softmax of every (token row i, head h) at [i * n_heads + h]
// (an empty one for a row without a valid index); the output is the same with or without it.
Mat sparse_mqa_before_rounding(const Mat& q, const Mat& kv, const Vec& sink, const IndexMat& indices, int n_heads,
                               double softmax_scale, const PrecisionPolicy& p,
                               std::vector<HeadSoftmax>* softmax = nullptr);

}  // namespace dsv4::ref
