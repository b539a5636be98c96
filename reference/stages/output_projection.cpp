// The end of Attention.forward (docs/math.md "attn/out_heads, attn/wo_a, out").
#include "reference/stages/output_projection.h"

#include <stdexcept>
#include <string>

#include "reference/parallel.h"
#include "reference/primitives/linear.h"

namespace dsv4::ref {

// o [s, H*d] -> [s, H*d]: each head's last rope dims rotated by -angle of the query position.
Mat inverse_rope_heads_before_rounding(const Mat& o, int64_t start_pos, const RopeTable& rope, const ModelConfig& cfg,
                                       const PrecisionPolicy& p) {
  if (o.cols() != static_cast<Index>(cfg.n_heads) * cfg.head_dim)
    throw std::invalid_argument("inverse_rope_heads: o has width " + std::to_string(o.cols()) + ", expected " +
                                std::to_string(cfg.n_heads) + " heads x " + std::to_string(cfg.head_dim));
  Mat out = o;
  const PrecisionPolicy last = unrounded_output(p);
  parallel_for(out.rows(), [&](int64_t i) {
    apply_rope(out.row(i), cfg.n_heads, cfg.head_dim, start_pos + i, rope, /*inverse=*/true, last);
  });
  return out;
}

Mat inverse_rope_heads(const Mat& o, int64_t start_pos, const RopeTable& rope, const ModelConfig& cfg,
                       const PrecisionPolicy& p) {
  return rounded(p.activations, inverse_rope_heads_before_rounding(o, start_pos, rope, cfg, p));
}

// o [s, H*d] -> [s, G*R]: o viewed as [s, G, H*d/G] (the heads of a group contiguous), group g
// projected by wo_a rows [g*R, (g+1)*R) (DeepSeek's bf16 einsum "bsgd,grd->bsgr").
Mat grouped_wo_a_before_rounding(const AttentionWeights& w, const Mat& o, const ModelConfig& cfg,
                                 const PrecisionPolicy& p) {
  const Index groups = cfg.o_groups;
  const Index rank = cfg.o_lora_rank;
  const Index group_width = groups > 0 ? o.cols() / groups : 0;
  if (groups < 1 || o.cols() != static_cast<Index>(cfg.n_heads) * cfg.head_dim || o.cols() % groups != 0 ||
      w.wo_a.rows() != groups * rank || w.wo_a.cols() != group_width)
    throw std::invalid_argument("grouped_wo_a: o [" + std::to_string(o.rows()) + ", " + std::to_string(o.cols()) +
                                "] and wo_a [" + std::to_string(w.wo_a.rows()) + ", " + std::to_string(w.wo_a.cols()) +
                                "] do not fit " + std::to_string(groups) + " groups of rank " + std::to_string(rank) +
                                " over " + std::to_string(cfg.n_heads) + " heads x " + std::to_string(cfg.head_dim));
  Mat out(o.rows(), groups * rank);
  for (Index g = 0; g < groups; ++g) {
    const Mat o_g = o.middleCols(g * group_width, group_width);
    const Mat wo_a_g = w.wo_a.middleRows(g * rank, rank);
    out.middleCols(g * rank, rank) = linear_exact(o_g, wo_a_g, Storage::fp64);
  }
  return out;
}

Mat grouped_wo_a(const AttentionWeights& w, const Mat& o, const ModelConfig& cfg, const PrecisionPolicy& p) {
  return rounded(p.activations, grouped_wo_a_before_rounding(w, o, cfg, p));
}

// o_lora [s, G*R] -> [s, dim]
Mat wo_b_before_rounding(const AttentionWeights& w, const Mat& o_lora, const PrecisionPolicy& p) {
  return linear_fp8_weight(o_lora, w.wo_b, unrounded_output(p));
}

Mat wo_b(const AttentionWeights& w, const Mat& o_lora, const PrecisionPolicy& p) {
  return rounded(p.activations, wo_b_before_rounding(w, o_lora, p));
}

}  // namespace dsv4::ref
