#pragma once
// The weights of one attention layer, as float values in double (FP8 weights dequantized: values on
// the e4m3 x 128x128-block-scale grid). Shapes follow the checkpoint (docs/capture-format.md "Weights").
#include <cstdint>
#include <string>

#include "reference/config.h"
#include "reference/tensor.h"

namespace dsv4::ref {

// One compressor: ratio r, head dim d, coff = 2 when r == 4 (overlap) else 1.
struct CompressorWeights {
  int ratio = 0;
  int head_dim = 0;
  Mat wkv;    // [coff*d, dim]   fp32 linear
  Mat wgate;  // [coff*d, dim]   fp32 linear
  Mat ape;    // [ratio, coff*d] added to the gate logits at position t mod ratio
  Vec norm;   // [d]             RMSNorm weight of the pooled entry
  int coff() const { return ratio == 4 ? 2 : 1; }
};

struct IndexerWeights {
  Mat wq_b;                      // [IH*ID, q_lora_rank] fp8 linear
  Mat weights_proj;              // [IH, dim]            bf16 linear
  CompressorWeights compressor;  // ratio 4, head dim ID (rotate + FP4 path)
};

struct AttentionWeights {
  int compress_ratio = 0;        // 0, 4 or 128
  Mat wq_a;                      // [q_lora_rank, dim]          fp8
  Vec q_norm;                    // [q_lora_rank]
  Mat wq_b;                      // [H*d, q_lora_rank]          fp8
  Mat wkv;                       // [d, dim]                    fp8
  Vec kv_norm;                   // [d]
  Vec attn_sink;                 // [H]
  Mat wo_a;                      // [G*o_lora_rank, H*d/G]      bf16
  Mat wo_b;                      // [dim, G*o_lora_rank]        fp8
  CompressorWeights compressor;  // ratio != 0
  IndexerWeights indexer;        // ratio == 4

  // Throws std::invalid_argument naming the tensor and both shapes when a shape contradicts cfg.
  void validate(const ModelConfig& cfg) const;

  // Random weights with the checkpoint's numerics: FP8 weights on the e4m3 block grid, bf16 weights
  // on the bf16 grid, scaled so activations stay O(1) (fan-in scaling). Same seed, same weights.
  static AttentionWeights random(const ModelConfig& cfg, int compress_ratio, uint64_t seed);
};

}  // namespace dsv4::ref
