#pragma once
// The end of Attention.forward (docs/math.md "output"): inverse RoPE of each head's last rope dims
// at the query position, the grouped low-rank projection wo_a (G groups of H/G heads), then wo_b.
#include "reference/config.h"
#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/tensor.h"
#include "reference/weights.h"

namespace dsv4::ref {

// Each stage as its value before the final rounding to p.activations (fp32 or exact: what
// DeepSeek's code casts to bf16), and that rounding.

// o [s, H*d] at positions start_pos.. -> [s, H*d]
Mat inverse_rope_heads_before_rounding(const Mat& o, int64_t start_pos, const RopeTable& rope, const ModelConfig& cfg,
                                       const PrecisionPolicy& p);
Mat inverse_rope_heads(const Mat& o, int64_t start_pos, const RopeTable& rope, const ModelConfig& cfg,
                       const PrecisionPolicy& p);

// o [s, H*d] -> [s, G*o_lora_rank]: group g is sum over its H*d/G inputs with wo_a rows g*R..(g+1)*R
Mat grouped_wo_a_before_rounding(const AttentionWeights& w, const Mat& o, const ModelConfig& cfg,
                                 const PrecisionPolicy& p);
Mat grouped_wo_a(const AttentionWeights& w, const Mat& o, const ModelConfig& cfg, const PrecisionPolicy& p);

// [s, G*o_lora_rank] -> [s, dim]
Mat wo_b_before_rounding(const AttentionWeights& w, const Mat& o_lora, const PrecisionPolicy& p);
Mat wo_b(const AttentionWeights& w, const Mat& o_lora, const PrecisionPolicy& p);

}  // namespace dsv4::ref
