#pragma once
// One DeepSeek-V4 attention layer (model.py Attention.forward; docs/math.md "layer"), for ratios
// 0 (window only), 4 (CSA) and 128 (HCA), prefill (start_pos 0), decode (s = 1) and chunked
// continuation, batch >= 1. Every intermediate the capture format names is returned. This is the
// one place the layer's data flow is written: every stage runs through a StageProvider (the oracle
// by default, a kernel backend in a replay), and a stage-local replay supplies captured inputs
// through StageInputs.
#include <memory>
#include <vector>

#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/stage_outputs.h"
#include "reference/stage_provider.h"
#include "reference/tensor.h"
#include "reference/weights.h"

namespace dsv4::ref {

class AttentionLayer {
 public:
  // Throws std::invalid_argument when cfg is invalid or the weights contradict it.
  AttentionLayer(ModelConfig cfg, AttentionWeights weights, PrecisionPolicy policy);

  const ModelConfig& config() const { return cfg_; }
  const AttentionWeights& weights() const { return *w_; }
  const PrecisionPolicy& policy() const { return p_; }
  const RopeTable& rope() const { return rope_; }
  int compress_ratio() const { return w_->compress_ratio; }

  // The same layer (configuration and weights, shared, not copied) under another policy: how a
  // stage provider runs one stage under a numerics variant (reference/mutation.h).
  AttentionLayer with_policy(PrecisionPolicy policy) const;

  // x [s, dim] of sequence `seq`, positions start_pos .. start_pos+s-1. start_pos 0 starts the
  // sequence anew (cache.reset(seq): fresh compressor states, as DeepSeek's code does not); any other
  // start_pos must equal cache.length(seq). Throws std::invalid_argument past max_seq_len, for a
  // start_pos the cache does not continue, and for a cache of another compress ratio.
  //
  // Each stage is computed by `stages`; where `inputs` gives a value for a stage's input, the stage
  // reads that value instead of the layer's own, and the cache keeps what the later stages read
  // (the window kv and compressed entries attention used, the compressor state the next call
  // continues from). The returned outputs are always the provider's own results.
  StageOutputs forward(const Mat& x, int64_t start_pos, KvCache& cache, int seq,
                       const StageProvider& stages = oracle_stages(), const StageInputs* inputs = nullptr) const;

  // Every sequence of the batch at the same start_pos (as DeepSeek's forward); xs[b] [s, dim].
  std::vector<StageOutputs> forward_batch(const std::vector<Mat>& xs, int64_t start_pos, KvCache& cache,
                                          const StageProvider& stages = oracle_stages()) const;

 private:
  AttentionLayer(ModelConfig cfg, std::shared_ptr<const AttentionWeights> weights, PrecisionPolicy policy);

  ModelConfig cfg_;
  std::shared_ptr<const AttentionWeights> w_;  // never null
  PrecisionPolicy p_;
  RopeTable rope_;
};

}  // namespace dsv4::ref
