#pragma once
// The q path and the window kv path of Attention.forward (docs/math.md "q path", "window kv").
#include "reference/config.h"
#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/tensor.h"
#include "reference/weights.h"

namespace dsv4::ref {

// q_latent = q_norm(wq_a(x)). x [s, dim] -> [s, q_lora_rank]; the value before the norm's final
// rounding to p.activations (its fp32 output), and that rounding.
Mat q_latent_before_rounding(const AttentionWeights& w, const Mat& x, const ModelConfig& cfg, const PrecisionPolicy& p);
Mat q_latent(const AttentionWeights& w, const Mat& x, const ModelConfig& cfg, const PrecisionPolicy& p);

// q = rope(head_rms_norm(wq_b(q_latent))) at positions start_pos + i. -> [s, H*d]; the value before
// RoPE's final rounding to p.activations (fp32 on the rope dims; the nope dims are the norm's bf16
// output), and that rounding.
Mat q_heads_before_rounding(const AttentionWeights& w, const Mat& q_latent, int64_t start_pos, const RopeTable& rope,
                            const ModelConfig& cfg, const PrecisionPolicy& p);
Mat q_heads(const AttentionWeights& w, const Mat& q_latent, int64_t start_pos, const RopeTable& rope,
            const ModelConfig& cfg, const PrecisionPolicy& p);

// kv = kv_nope_quant(rope(kv_norm(wkv(x)))). x [s, dim] -> [s, d]
Mat window_kv(const AttentionWeights& w, const Mat& x, int64_t start_pos, const RopeTable& rope, const ModelConfig& cfg,
              const PrecisionPolicy& p);

// FP8 fake-quant of the nope dims (all but the last rope_dim) of each row, when p.kv_nope is set.
void quantize_kv_nope(Mat& kv, int rope_dim, const PrecisionPolicy& p);

}  // namespace dsv4::ref
