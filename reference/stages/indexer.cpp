// Lightning indexer (docs/math.md "indexer/q, indexer/weights" and "indexer/scores").
#include "reference/stages/indexer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "reference/numerics/block_quant.h"
#include "reference/parallel.h"
#include "reference/primitives/dot.h"
#include "reference/primitives/hadamard.h"
#include "reference/primitives/linear.h"

namespace dsv4::ref {
namespace {

double relu(double v) { return v < 0 ? 0.0 : v; }  // NaN stays NaN, as torch's relu

std::string shape(Index rows, Index cols) { return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]"; }

}  // namespace

// q_latent [s, q_lora_rank] -> [s, IH*ID]
Mat indexer_q(const IndexerWeights& w, const Mat& q_latent, int64_t start_pos, const RopeTable& rope,
              const ModelConfig& cfg, const PrecisionPolicy& p) {
  const int heads = cfg.index_n_heads;
  const int head_dim = cfg.index_head_dim;
  Mat q = linear_fp8_weight(q_latent, w.wq_b, p);
  if (q.cols() != static_cast<Index>(heads) * head_dim)
    throw std::invalid_argument("indexer_q: wq_b gives width " + std::to_string(q.cols()) + ", expected " +
                                std::to_string(heads) + " heads x " + std::to_string(head_dim));
  if (p.indexer_qk && (p.indexer_qk->block <= 0 || head_dim % p.indexer_qk->block != 0))
    throw std::invalid_argument("indexer_q: index_head_dim " + std::to_string(head_dim) +
                                " is not a multiple of the block of " + p.indexer_qk->name());

  parallel_for(q.rows(),
               [&](int64_t i) { apply_rope(q.row(i), heads, head_dim, start_pos + i, rope, /*inverse=*/false, p); });
  if (p.indexer_hadamard) q = hadamard_rows(q, head_dim, p);
  // One row of IH*ID values: its blocks never cross a head (ID is a multiple of the block).
  if (p.indexer_q_quant) quantize_indexer_rows(q, p);
  return q;
}

// rows [n, width] in place: each row fake-quantized by p.indexer_qk, then rounded to activations.
void quantize_indexer_rows(Mat& rows, const PrecisionPolicy& p) {
  if (!p.indexer_qk) return;
  const BlockFormat format = *p.indexer_qk;
  // Checked here: an exception must not leave the parallel loop.
  if (format.block <= 0 || rows.cols() % format.block != 0)
    throw std::invalid_argument("quantize_indexer_rows: width " + std::to_string(rows.cols()) +
                                " is not a multiple of the block of " + format.name());
  parallel_for(rows.rows(), [&](int64_t i) {
    std::span<double> row(rows.row(i).data(), static_cast<size_t>(rows.cols()));
    fake_quant_row(format, row);
    for (double& v : row) v = round_to(p.activations, v);
  });
}

// x [s, dim] -> [s, IH]. DeepSeek: bf16 linear, then a bf16 tensor times the Python float
// ID^-0.5 * IH^-0.5 (2^-6.5 for both models), which torch computes in fp32 opmath.
Mat indexer_weights_before_rounding(const IndexerWeights& w, const Mat& x, const ModelConfig& cfg,
                                    const PrecisionPolicy& p) {
  const double multiplier = round_to(p.fp32_tensors, std::pow(static_cast<double>(cfg.index_head_dim), -0.5) *
                                                         std::pow(static_cast<double>(cfg.index_n_heads), -0.5));
  return linear_exact(x, w.weights_proj, p.activations).unaryExpr([&](double v) {
    return round_to(p.fp32_tensors, v * multiplier);
  });
}

Mat indexer_weights(const IndexerWeights& w, const Mat& x, const ModelConfig& cfg, const PrecisionPolicy& p) {
  return rounded(p.activations, indexer_weights_before_rounding(w, x, cfg, p));
}

// q [s, IH*ID], weights [s, IH], keys [n_keys, ID] -> [s, n_keys]
// I[i, j] = S( sum_h S( S(w_h) * relu(S(q_h . k_j)) ) ) for j < (t+1)/ratio (t = start_pos + i),
// S = rounding to p.indexer_scores (DeepSeek: einsum with fp32 accumulation to bf16, relu, times w
// to bf16, head sum to bf16); -inf where the entry's block is not complete at t. Masked keys are
// never read.
Mat indexer_scores_before_rounding(const Mat& q, const Mat& weights, const Mat& keys, int64_t start_pos, int ratio,
                                   const PrecisionPolicy& p) {
  const Index heads = weights.cols();
  if (ratio < 1) throw std::invalid_argument("indexer_scores: ratio must be >= 1, got " + std::to_string(ratio));
  if (start_pos < 0) throw std::invalid_argument("indexer_scores: start_pos " + std::to_string(start_pos) + " < 0");
  if (heads < 1 || q.rows() != weights.rows() || q.cols() % heads != 0 ||
      (keys.rows() > 0 && keys.cols() * heads != q.cols()))
    throw std::invalid_argument("indexer_scores: q " + shape(q.rows(), q.cols()) + ", weights " +
                                shape(weights.rows(), weights.cols()) + " and keys " + shape(keys.rows(), keys.cols()) +
                                " do not fit q [s, IH*ID], weights [s, IH], keys [n_keys, ID]");
  const Index head_dim = q.cols() / heads;

  const Storage S = p.indexer_scores;
  const Index n_keys = keys.rows();
  Mat scores = Mat::Constant(q.rows(), n_keys, -std::numeric_limits<double>::infinity());
  parallel_for(q.rows(), [&](int64_t i) {
    // Entry j is visible to token t once its block is complete: j < (t + 1) / ratio (causal_shift
    // moves that boundary: a numerics variant, 0 in DeepSeek's code).
    const int64_t visible = std::clamp<int64_t>((start_pos + i + 1 + p.variant.causal_shift) / ratio, 0, n_keys);
    for (Index j = 0; j < visible; ++j) {
      double head_sum = 0;
      for (Index h = 0; h < heads; ++h) {
        const double qk = round_to(S, fixed_order_dot(q.row(i).data() + h * head_dim, keys.row(j).data(), head_dim));
        head_sum += round_to(S, round_to(S, weights(i, h)) * relu(qk));
      }
      scores(i, j) = head_sum;
    }
  });
  return scores;
}

Mat indexer_scores(const Mat& q, const Mat& weights, const Mat& keys, int64_t start_pos, int ratio,
                   const PrecisionPolicy& p) {
  return rounded(p.indexer_scores, indexer_scores_before_rounding(q, weights, keys, start_pos, ratio, p));
}

}  // namespace dsv4::ref
