#include "verify/replay/pre_quant_recorder.h"

#include <utility>

#include "reference/layer.h"
#include "reference/pre_quant.h"

namespace dsv4::verify {

namespace {

// The layer under the policy that stops `stage` just before its final rounding.
ref::AttentionLayer unquantized(const ref::AttentionLayer& layer, const ref::PreQuantDef& d) {
  return layer.with_policy(d.without_quantization(layer.policy()));
}

}  // namespace

ref::Mat PreQuantRecorder::window_kv(const ref::AttentionLayer& layer, const ref::Mat& x, int64_t start_pos) const {
  const ref::PreQuantDef& d = *ref::pre_quant_of(ref::Stage::kv);
  ref::Mat kv = StageProvider::window_kv(unquantized(layer, d), x, start_pos);
  recorded_[std::string(d.name)].push_back(kv);
  d.quantize(kv, layer.config(), layer.policy());
  return kv;
}

ref::CompressorOutput PreQuantRecorder::compress(const ref::AttentionLayer& layer, ref::CompressorKind kind,
                                                 const ref::Mat& x, int64_t start_pos,
                                                 ref::CompressorState& state) const {
  const ref::PreQuantDef& d = *ref::pre_quant_of(
      kind == ref::CompressorKind::main ? ref::Stage::compressor_entries : ref::Stage::indexer_compressor_entries);
  ref::CompressorOutput out = StageProvider::compress(unquantized(layer, d), kind, x, start_pos, state);
  recorded_[std::string(d.name)].push_back(out.entries);
  d.quantize(out.entries, layer.config(), layer.policy());
  return out;
}

ref::Mat PreQuantRecorder::indexer_q(const ref::AttentionLayer& layer, const ref::Mat& q_latent,
                                     int64_t start_pos) const {
  const ref::PreQuantDef& d = *ref::pre_quant_of(ref::Stage::indexer_q);
  ref::Mat q = StageProvider::indexer_q(unquantized(layer, d), q_latent, start_pos);
  recorded_[std::string(d.name)].push_back(q);
  d.quantize(q, layer.config(), layer.policy());
  return q;
}

std::map<std::string, std::vector<ref::Mat>> PreQuantRecorder::take() { return std::exchange(recorded_, {}); }

}  // namespace dsv4::verify
