#pragma once
// The oracle with its pre-quantization values kept (docs/capture-format.md "Pre-quantization
// values"): the stages whose last step is a block quantization (kv, the compressors' entries,
// indexer/q) are computed in two steps, the oracle's function under the policy without that
// rounding (reference/pre_quant.h without_quantization), then the rounding (quantize); the first
// result is recorded. Both steps are the oracle's own code, so every result is the oracle's bit
// for bit; synth uses this provider to write the pre_quant/ datasets.
#include <map>
#include <string>
#include <vector>

#include "reference/stage_provider.h"

namespace dsv4::verify {

class PreQuantRecorder : public ref::StageProvider {
 public:
  ref::Mat window_kv(const ref::AttentionLayer& layer, const ref::Mat& x, int64_t start_pos) const override;
  ref::CompressorOutput compress(const ref::AttentionLayer& layer, ref::CompressorKind kind, const ref::Mat& x,
                                 int64_t start_pos, ref::CompressorState& state) const override;
  ref::Mat indexer_q(const ref::AttentionLayer& layer, const ref::Mat& q_latent, int64_t start_pos) const override;

  // The values recorded since the last take(), by dataset name ("pre_quant/kv", ...), one matrix
  // per computation in call order (AttentionLayer::forward_batch: one per sequence); then forgets them.
  std::map<std::string, std::vector<ref::Mat>> take();

 private:
  mutable std::map<std::string, std::vector<ref::Mat>> recorded_;
};

}  // namespace dsv4::verify
