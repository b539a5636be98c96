#include "verify/replay/pre_rounding_recorder.h"

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

ref::Mat PreRoundingRecorder::record(ref::Stage stage, ref::Mat before, ref::Storage final_storage) const {
  recorded_[stage].push_back(before);
  return ref::rounded(final_storage, std::move(before));
}

ref::Mat PreRoundingRecorder::q_latent(const ref::AttentionLayer& layer, const ref::Mat& x) const {
  return record(ref::Stage::q_latent, ref::before_final_rounding::q_latent(layer, x), layer.policy().activations);
}

ref::Mat PreRoundingRecorder::q_heads(const ref::AttentionLayer& layer, const ref::Mat& q_latent,
                                      int64_t start_pos) const {
  return record(ref::Stage::q, ref::before_final_rounding::q_heads(layer, q_latent, start_pos),
                layer.policy().activations);
}

ref::Mat PreRoundingRecorder::window_kv(const ref::AttentionLayer& layer, const ref::Mat& x, int64_t start_pos) const {
  const ref::PreQuantDef& d = *ref::pre_quant_of(ref::Stage::kv);
  ref::Mat kv = StageProvider::window_kv(unquantized(layer, d), x, start_pos);
  recorded_[d.stage].push_back(kv);
  d.quantize(kv, layer.config(), layer.policy());
  return kv;
}

ref::CompressorOutput PreRoundingRecorder::compress(const ref::AttentionLayer& layer, ref::CompressorKind kind,
                                                    const ref::Mat& x, int64_t start_pos,
                                                    ref::CompressorState& state) const {
  const ref::PreQuantDef& d = *ref::pre_quant_of(
      kind == ref::CompressorKind::main ? ref::Stage::compressor_entries : ref::Stage::indexer_compressor_entries);
  ref::CompressorOutput out = StageProvider::compress(unquantized(layer, d), kind, x, start_pos, state);
  recorded_[d.stage].push_back(out.entries);
  d.quantize(out.entries, layer.config(), layer.policy());
  return out;
}

ref::Mat PreRoundingRecorder::indexer_q(const ref::AttentionLayer& layer, const ref::Mat& q_latent,
                                        int64_t start_pos) const {
  const ref::PreQuantDef& d = *ref::pre_quant_of(ref::Stage::indexer_q);
  ref::Mat q = StageProvider::indexer_q(unquantized(layer, d), q_latent, start_pos);
  recorded_[d.stage].push_back(q);
  d.quantize(q, layer.config(), layer.policy());
  return q;
}

ref::Mat PreRoundingRecorder::indexer_weights(const ref::AttentionLayer& layer, const ref::Mat& x) const {
  return record(ref::Stage::indexer_weights, ref::before_final_rounding::indexer_weights(layer, x),
                layer.policy().activations);
}

ref::Mat PreRoundingRecorder::indexer_scores(const ref::AttentionLayer& layer, const ref::Mat& q,
                                             const ref::Mat& weights, const ref::KvCache& cache, int seq,
                                             int64_t start_pos) const {
  return record(ref::Stage::indexer_scores,
                ref::before_final_rounding::indexer_scores(layer, q, weights, cache, seq, start_pos),
                layer.policy().indexer_scores);
}

ref::Mat PreRoundingRecorder::sparse_mqa(const ref::AttentionLayer& layer, const ref::Mat& q,
                                         const ref::AttentionKv& kv, const ref::IndexMat& indices) const {
  return record(ref::Stage::attn_core, ref::before_final_rounding::sparse_mqa(layer, q, kv, indices),
                layer.policy().activations);
}

ref::Mat PreRoundingRecorder::inverse_rope_heads(const ref::AttentionLayer& layer, const ref::Mat& core,
                                                 int64_t start_pos) const {
  return record(ref::Stage::attn_out_heads, ref::before_final_rounding::inverse_rope_heads(layer, core, start_pos),
                layer.policy().activations);
}

ref::Mat PreRoundingRecorder::grouped_wo_a(const ref::AttentionLayer& layer, const ref::Mat& out_heads) const {
  return record(ref::Stage::attn_wo_a, ref::before_final_rounding::grouped_wo_a(layer, out_heads),
                layer.policy().activations);
}

ref::Mat PreRoundingRecorder::wo_b(const ref::AttentionLayer& layer, const ref::Mat& wo_a) const {
  return record(ref::Stage::out, ref::before_final_rounding::wo_b(layer, wo_a), layer.policy().activations);
}

std::map<ref::Stage, std::vector<ref::Mat>> PreRoundingRecorder::take() { return std::exchange(recorded_, {}); }

}  // namespace dsv4::verify
