#include "verify/replay/pre_rounding_recorder.h"

#include <utility>

#include "reference/layer.h"
#include "reference/numerics/storage.h"
#include "reference/pre_quant.h"
#include "reference/stages/sparse_mqa.h"

namespace dsv4::verify {

namespace {

// A block-quantized stage (reference/pre_quant.h): `compute` runs the oracle's stage function on the
// layer under the policy that stops just before the quantization, `values` picks the quantized
// matrix out of its result; that matrix is recorded, then quantized in place by the oracle's own
// rounding step, so the result is the oracle's stage bit for bit.
template <typename Compute, typename Values>
auto recorded_then_quantized(std::map<ref::Stage, std::vector<ref::Mat>>& recorded, ref::Stage stage,
                             const ref::AttentionLayer& layer, Compute compute, Values values) {
  const ref::PreQuantDef& d = *ref::pre_quant_of(stage);
  auto result = compute(layer.with_policy(d.without_quantization(layer.policy())));
  ref::Mat& v = values(result);
  recorded[stage].push_back(v);
  d.quantize(v, layer.config(), layer.policy());
  return result;
}

ref::Mat& itself(ref::Mat& m) { return m; }

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
  return recorded_then_quantized(
      recorded_, ref::Stage::kv, layer,
      [&](const ref::AttentionLayer& l) { return StageProvider::window_kv(l, x, start_pos); }, itself);
}

ref::CompressorOutput PreRoundingRecorder::compress(const ref::AttentionLayer& layer, ref::CompressorKind kind,
                                                    const ref::Mat& x, int64_t start_pos,
                                                    ref::CompressorState& state) const {
  const ref::Stage stage =
      kind == ref::CompressorKind::main ? ref::Stage::compressor_entries : ref::Stage::indexer_compressor_entries;
  return recorded_then_quantized(
      recorded_, stage, layer,
      [&](const ref::AttentionLayer& l) { return StageProvider::compress(l, kind, x, start_pos, state); },
      [](ref::CompressorOutput& out) -> ref::Mat& { return out.entries; });
}

ref::Mat PreRoundingRecorder::indexer_q(const ref::AttentionLayer& layer, const ref::Mat& q_latent,
                                        int64_t start_pos) const {
  return recorded_then_quantized(
      recorded_, ref::Stage::indexer_q, layer,
      [&](const ref::AttentionLayer& l) { return StageProvider::indexer_q(l, q_latent, start_pos); }, itself);
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
  if (!probability_bounds_ || !follows_deepseek_probabilities(layer.policy()))
    return record(ref::Stage::attn_core, ref::before_final_rounding::sparse_mqa(layer, q, kv, indices),
                  layer.policy().activations);
  // before_final_rounding::sparse_mqa, with the oracle's softmax kept for the bound.
  const ref::SparseMqaOperands o = ref::sparse_mqa_operands(layer, kv);
  std::vector<ref::HeadSoftmax> softmax;
  ref::Mat before = ref::sparse_mqa_before_rounding(q, o.kv, o.sink, indices, layer.config().n_heads, o.softmax_scale,
                                                    layer.policy(), &softmax);
  bounds_.push_back(probability_flip_bound(q, o.kv, indices, softmax,
                                           ref::round_to(layer.policy().fp32_tensors, o.softmax_scale), before));
  return record(ref::Stage::attn_core, std::move(before), layer.policy().activations);
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

std::vector<ProbabilityFlipBound> PreRoundingRecorder::take_probability_bounds() { return std::exchange(bounds_, {}); }

}  // namespace dsv4::verify
