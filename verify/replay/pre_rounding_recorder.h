#pragma once
// The oracle with its values before each stage's final rounding kept: the stages whose last step is
// a block quantization (kv, the compressors' entries, indexer/q; reference/pre_quant.h) and the bf16
// stages (q_latent, q, indexer/weights, indexer/scores, attn/core, attn/out_heads, attn/wo_a, out;
// reference/stage_provider.h before_final_rounding) are computed in two steps, the value before the
// rounding, which is recorded, then the rounding. Both steps are the oracle's own code, so every
// result is the oracle's bit for bit. The replay judges rounded stages against the recorded values
// (verify/compare/rounded.h); synth writes the block-quantized ones as the pre_quant/ datasets.
#include <map>
#include <vector>

#include "reference/stage_provider.h"
#include "verify/tolerance/probability_flips.h"

namespace dsv4::verify {

class PreRoundingRecorder : public ref::StageProvider {
 public:
  // probability_bounds: also derive attn/core's per-element bound for producers that follow
  // DeepSeek's probability convention (verify/tolerance/probability_flips.h), where the layer's
  // policy computes attn/core by it.
  explicit PreRoundingRecorder(bool probability_bounds = false) : probability_bounds_(probability_bounds) {}

  ref::Mat q_latent(const ref::AttentionLayer& layer, const ref::Mat& x) const override;
  ref::Mat q_heads(const ref::AttentionLayer& layer, const ref::Mat& q_latent, int64_t start_pos) const override;
  ref::Mat window_kv(const ref::AttentionLayer& layer, const ref::Mat& x, int64_t start_pos) const override;
  ref::CompressorOutput compress(const ref::AttentionLayer& layer, ref::CompressorKind kind, const ref::Mat& x,
                                 int64_t start_pos, ref::CompressorState& state) const override;
  ref::Mat indexer_q(const ref::AttentionLayer& layer, const ref::Mat& q_latent, int64_t start_pos) const override;
  ref::Mat indexer_weights(const ref::AttentionLayer& layer, const ref::Mat& x) const override;
  ref::Mat indexer_scores(const ref::AttentionLayer& layer, const ref::Mat& q, const ref::Mat& weights,
                          const ref::KvCache& cache, int seq, int64_t start_pos) const override;
  ref::Mat sparse_mqa(const ref::AttentionLayer& layer, const ref::Mat& q, const ref::AttentionKv& kv,
                      const ref::IndexMat& indices) const override;
  ref::Mat inverse_rope_heads(const ref::AttentionLayer& layer, const ref::Mat& core, int64_t start_pos) const override;
  ref::Mat grouped_wo_a(const ref::AttentionLayer& layer, const ref::Mat& out_heads) const override;
  ref::Mat wo_b(const ref::AttentionLayer& layer, const ref::Mat& wo_a) const override;

  // The values recorded since the last take(), by stage, one matrix per computation in call order
  // (AttentionLayer::forward_batch: one per sequence); then forgets them.
  std::map<ref::Stage, std::vector<ref::Mat>> take();
  // attn/core's per-element bounds derived since the last call, one per computation in call order
  // (empty unless asked for and the policy follows the convention); then forgets them.
  std::vector<ProbabilityFlipBound> take_probability_bounds();

 private:
  // Records `before` for `stage` and returns it rounded to `final_storage`.
  ref::Mat record(ref::Stage stage, ref::Mat before, ref::Storage final_storage) const;
  mutable std::map<ref::Stage, std::vector<ref::Mat>> recorded_;
  bool probability_bounds_;
  mutable std::vector<ProbabilityFlipBound> bounds_;
};

}  // namespace dsv4::verify
