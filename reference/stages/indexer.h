#pragma once
// Lightning indexer (model.py Indexer; docs/math.md "indexer"): scores of query t against the
// indexer's compressed keys, I[t, j] = sum_h w_h(x_t) * relu(q_h(t) . k_j), masked to -inf where
// j >= (t + 1) / 4 (causal: an entry is visible once its block is complete).
#include "reference/config.h"
#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/tensor.h"
#include "reference/weights.h"

namespace dsv4::ref {

// q = quant(hadamard(rope(wq_b(q_latent)))). q_latent [s, q_lora_rank] -> [s, IH*ID]
// RoPE on the last rope dims of each of the IH heads; Hadamard of size ID per head when
// p.indexer_hadamard; p.indexer_qk fake-quant over each token's row of IH*ID values (ID is a multiple
// of the block, so blocks stay inside a head; a row-amax rule such as NVFP4's sees the whole row),
// unless p.indexer_q_quant is off (the keys alone are quantized; q stays in p.activations).
Mat indexer_q(const IndexerWeights& w, const Mat& q_latent, int64_t start_pos, const RopeTable& rope,
              const ModelConfig& cfg, const PrecisionPolicy& p);

// The final rounding of indexer/q and of the indexer compressor's entries (FP4 simulation): each row
// of rows [n, width] fake-quantized by p.indexer_qk in its blocks, then rounded to the activation
// storage; nothing when p.indexer_qk is unset. Throws std::invalid_argument when the width is not a
// multiple of the block.
void quantize_indexer_rows(Mat& rows, const PrecisionPolicy& p);

// w = weights_proj(x) * ID^-1/2 * IH^-1/2 (rounded to activations). x [s, dim] -> [s, IH]
// Officially: a bf16 linear, then the bf16 tensor times the Python float 2^-6.5, which torch
// computes in fp32 (the multiplier rounded to p.fp32_tensors, the product to fp32, then to bf16).
// indexer_weights_before_rounding: the fp32 product, before that rounding to p.activations.
Mat indexer_weights_before_rounding(const IndexerWeights& w, const Mat& x, const ModelConfig& cfg,
                                    const PrecisionPolicy& p);
Mat indexer_weights(const IndexerWeights& w, const Mat& x, const ModelConfig& cfg, const PrecisionPolicy& p);

// Scores of the s queries at positions start_pos.. against keys [n_keys, ID], n_keys =
// (start_pos + s) / 4 (every entry complete by the end of the call). -inf where not visible; keys
// a query cannot see are never read. Rounded to S = p.indexer_scores after the q.k dot product,
// after relu(q.k) * w_h, and after the head sum: S(sum_h S(S(w_h) relu(S(q_h . k_j)))).
// q [s, IH*ID], weights [s, IH], keys [n_keys, ID] -> [s, n_keys]
// indexer_scores_before_rounding: the head sums before their final rounding to S.
Mat indexer_scores_before_rounding(const Mat& q, const Mat& weights, const Mat& keys, int64_t start_pos, int ratio,
                                   const PrecisionPolicy& p);
Mat indexer_scores(const Mat& q, const Mat& weights, const Mat& keys, int64_t start_pos, int ratio,
                   const PrecisionPolicy& p);

}  // namespace dsv4::ref
