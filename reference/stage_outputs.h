#pragma once
// What one call of one sequence computed, stage by stage (docs/math.md "layer"). Member names
// follow the stage registry (reference/stage_registry.h), which maps each capture dataset name to
// its member here.
#include "reference/stages/compressor.h"
#include "reference/tensor.h"

namespace dsv4::ref {

struct StageOutputs {
  Mat q_latent;                              // [s, q_lora_rank]
  Mat q;                                     // [s, H*d]
  Mat kv;                                    // [s, d]
  Mat compressor_entries;                    // [n_new, d]          (ratio != 0)
  CompressorState compressor_state;          // after the call (ratio != 0)
  Mat indexer_q;                             // [s, IH*ID]          (ratio 4)
  Mat indexer_weights;                       // [s, IH]             (ratio 4)
  Mat indexer_compressor_entries;            // [n_new, ID] (ratio 4)
  CompressorState indexer_compressor_state;  // (ratio 4)
  Mat indexer_scores;                        // [s, n_visible]      (ratio 4)
  IndexMat indexer_topk;                     // [s, k]              (ratio 4), offset applied, -1 padding
  IndexMat topk_idxs;                        // [s, K]              window then compressed
  Mat attn_core;                             // [s, H*d]            sparse attention output, before inverse RoPE
  Mat attn_out_heads;                        // [s, H*d]            after inverse RoPE
  Mat attn_wo_a;                             // [s, G*o_lora_rank]
  Mat out;                                   // [s, dim]
};

}  // namespace dsv4::ref
