#pragma once
// One DeepSeek-V4 attention layer (model.py Attention.forward; docs/math.md "layer"), for ratios
// 0 (window only), 4 (CSA) and 128 (HCA), prefill (start_pos 0), decode (s = 1) and chunked
// continuation, batch >= 1. Every intermediate the capture format names is returned.
#include <optional>
#include <vector>

#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/stages/compressor.h"
#include "reference/tensor.h"
#include "reference/weights.h"

namespace dsv4::ref {

// One call of one sequence. Names follow the capture format's stage datasets.
struct StageOutputs {
  Mat q_latent;            // [s, q_lora_rank]
  Mat q;                   // [s, H*d]
  Mat kv;                  // [s, d]
  Mat compressor_entries;  // [n_new, d]          (ratio != 0)
  CompressorState compressor_state;   // after the call (ratio != 0)
  Mat indexer_q;           // [s, IH*ID]          (ratio 4)
  Mat indexer_weights;     // [s, IH]             (ratio 4)
  Mat indexer_compressor_entries;     // [n_new, ID] (ratio 4)
  CompressorState indexer_compressor_state;  // (ratio 4)
  Mat indexer_scores;      // [s, n_visible]      (ratio 4)
  IndexMat indexer_topk;   // [s, k]              (ratio 4), offset applied, -1 padding
  IndexMat topk_idxs;      // [s, K]              window then compressed
  Mat attn_core;           // [s, H*d]            sparse attention output, before inverse RoPE
  Mat attn_out_heads;      // [s, H*d]            after inverse RoPE
  Mat attn_wo_a;           // [s, G*o_lora_rank]
  Mat out;                 // [s, dim]
};

class AttentionLayer {
 public:
  // Throws std::invalid_argument when cfg is invalid or the weights contradict it.
  AttentionLayer(ModelConfig cfg, AttentionWeights weights, PrecisionPolicy policy);

  const ModelConfig& config() const { return cfg_; }
  const AttentionWeights& weights() const { return w_; }
  const PrecisionPolicy& policy() const { return p_; }
  const RopeTable& rope() const { return rope_; }
  int compress_ratio() const { return w_.compress_ratio; }

  // x [s, dim] of sequence `seq`, positions start_pos .. start_pos+s-1. start_pos 0 starts the
  // sequence anew (cache.reset(seq): fresh compressor states, as DeepSeek's code does not); any other
  // start_pos must equal cache.length(seq). Throws std::invalid_argument past max_seq_len, for a
  // start_pos the cache does not continue, and for a cache of another compress ratio.
  StageOutputs forward(const Mat& x, int64_t start_pos, KvCache& cache, int seq) const;

  // Every sequence of the batch at the same start_pos (as DeepSeek's forward); xs[b] [s, dim].
  std::vector<StageOutputs> forward_batch(const std::vector<Mat>& xs, int64_t start_pos, KvCache& cache) const;

 private:
  ModelConfig cfg_;
  AttentionWeights w_;
  PrecisionPolicy p_;
  RopeTable rope_;
};

}  // namespace dsv4::ref
