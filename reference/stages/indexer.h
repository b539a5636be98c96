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
Mat indexer_q(const IndexerWeights& w, const Mat& q_latent, int64_t start_pos, const RopeTable& rope,
              const ModelConfig& cfg, const PrecisionPolicy& p);

// w = weights_proj(x) * ID^-1/2 * IH^-1/2 (rounded to activations). x [s, dim] -> [s, IH]
Mat indexer_weights(const IndexerWeights& w, const Mat& x, const ModelConfig& cfg, const PrecisionPolicy& p);

// Scores of the s queries at positions start_pos.. against keys [n_keys, ID], n_keys =
// (start_pos + s) / 4 (every entry complete by the end of the call). -inf where not visible.
// q [s, IH*ID], weights [s, IH], keys [n_keys, ID] -> [s, n_keys]
Mat indexer_scores(const Mat& q, const Mat& weights, const Mat& keys, int64_t start_pos, int ratio,
                   const PrecisionPolicy& p);

}  // namespace dsv4::ref
