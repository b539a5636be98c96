// The q path and the window kv path (docs/math.md "q_latent", "q", "kv").
#include "reference/stages/projections.h"

#include <span>
#include <stdexcept>
#include <string>

#include "reference/numerics/block_quant.h"
#include "reference/parallel.h"
#include "reference/primitives/linear.h"
#include "reference/primitives/rmsnorm.h"

namespace dsv4::ref {
namespace {

// RoPE runs inside a parallel loop, which an exception must not leave: the width is checked first.
void require_heads(const Mat& m, int n_heads, int head_dim, const char* what) {
  if (m.cols() != static_cast<Index>(n_heads) * head_dim)
    throw std::invalid_argument(std::string(what) + ": projected width " + std::to_string(m.cols()) + ", expected " +
                                std::to_string(n_heads) + " heads x " + std::to_string(head_dim));
}

}  // namespace

// x [s, dim] -> [s, q_lora_rank]
Mat q_latent_before_rounding(const AttentionWeights& w, const Mat& x, const ModelConfig& cfg,
                             const PrecisionPolicy& p) {
  return rms_norm(linear_fp8_weight(x, w.wq_a, p), w.q_norm, cfg.norm_eps, unrounded_output(p));
}

Mat q_latent(const AttentionWeights& w, const Mat& x, const ModelConfig& cfg, const PrecisionPolicy& p) {
  return rounded(p.activations, q_latent_before_rounding(w, x, cfg, p));
}

// q_latent [s, q_lora_rank] -> [s, H*d]
Mat q_heads_before_rounding(const AttentionWeights& w, const Mat& q_latent, int64_t start_pos, const RopeTable& rope,
                            const ModelConfig& cfg, const PrecisionPolicy& p) {
  Mat q = head_rms_norm(linear_fp8_weight(q_latent, w.wq_b, p), cfg.n_heads, cfg.norm_eps, p);
  require_heads(q, cfg.n_heads, cfg.head_dim, "q_heads");
  const PrecisionPolicy last = unrounded_output(p);
  parallel_for(q.rows(), [&](int64_t i) {
    apply_rope(q.row(i), cfg.n_heads, cfg.head_dim, start_pos + i, rope, /*inverse=*/false, last);
  });
  return q;
}

Mat q_heads(const AttentionWeights& w, const Mat& q_latent, int64_t start_pos, const RopeTable& rope,
            const ModelConfig& cfg, const PrecisionPolicy& p) {
  return rounded(p.activations, q_heads_before_rounding(w, q_latent, start_pos, rope, cfg, p));
}

// x [s, dim] -> [s, d]
Mat window_kv(const AttentionWeights& w, const Mat& x, int64_t start_pos, const RopeTable& rope, const ModelConfig& cfg,
              const PrecisionPolicy& p) {
  Mat kv = rms_norm(linear_fp8_weight(x, w.wkv, p), w.kv_norm, cfg.norm_eps, p);
  require_heads(kv, 1, cfg.head_dim, "window_kv");
  parallel_for(kv.rows(), [&](int64_t i) {
    apply_rope(kv.row(i), /*n_heads=*/1, cfg.head_dim, start_pos + i, rope, /*inverse=*/false, p);
  });
  quantize_kv_nope(kv, cfg.rope_head_dim, p);
  return kv;
}

// kv [rows, d]: dims [0, d - rope_dim) of each row become bf16(s * e4m3(x / s)) per block (act_quant
// inplace; docs/math.md "kv"); the rope dims keep their values. Nothing happens when p.kv_nope is unset.
void quantize_kv_nope(Mat& kv, int rope_dim, const PrecisionPolicy& p) {
  if (!p.kv_nope) return;
  const Index nope = kv.cols() - rope_dim;
  if (rope_dim < 0 || nope < 0)
    throw std::invalid_argument("quantize_kv_nope: rope_dim " + std::to_string(rope_dim) + " must lie in [0, " +
                                std::to_string(kv.cols()) + "] (the row width)");
  const BlockFormat format = *p.kv_nope;
  // Checked here: an exception must not leave the parallel loop.
  if (format.block <= 0 || nope % format.block != 0)
    throw std::invalid_argument("quantize_kv_nope: nope width " + std::to_string(nope) +
                                " is not a multiple of the block " + std::to_string(format.block) + " of " +
                                format.name());
  parallel_for(kv.rows(), [&](int64_t i) {
    std::span<double> nope_dims(kv.row(i).data(), static_cast<size_t>(nope));
    fake_quant_row(format, nope_dims);
    for (double& v : nope_dims) v = round_to(p.activations, v);
  });
}

}  // namespace dsv4::ref
