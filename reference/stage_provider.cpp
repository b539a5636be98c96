// The oracle as a stage provider: each entry is the reference/ function of the same name, with the
// layer's configuration, weights, policy and RoPE table; and the kv rows of a call's index space.
#include "reference/stage_provider.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/layer.h"
#include "reference/stages/indexer.h"
#include "reference/stages/output_projection.h"
#include "reference/stages/projections.h"
#include "reference/stages/sparse_mqa.h"
#include "reference/stages/topk.h"

namespace dsv4::ref {

Mat AttentionKv::rows() const {
  const int64_t W = space.window, s = space.seqlen;
  const int64_t expected_length = space.kind == IndexSpace::Kind::decode ? space.start_pos + 1 : space.start_pos;
  if (space.kind != IndexSpace::Kind::prefill && cache.length(seq) != expected_length)
    throw std::logic_error("AttentionKv: the cache of sequence " + std::to_string(seq) + " holds positions [0, " +
                           std::to_string(cache.length(seq)) + "), the call's index space needs [0, " +
                           std::to_string(expected_length) + ")");
  if (fresh.rows() != s)
    throw std::invalid_argument("AttentionKv: " + std::to_string(fresh.rows()) + " fresh kv rows for a call of " +
                                std::to_string(s) + " tokens");
  Mat out(space.rows(n_entries), fresh.cols());
  switch (space.kind) {
    case IndexSpace::Kind::prefill: out.topRows(s) = fresh; break;
    case IndexSpace::Kind::decode: out.topRows(W) = cache.ring(seq, space.start_pos + 1); break;
    case IndexSpace::Kind::chunked:
      out.topRows(W) = cache.ring(seq, space.start_pos);
      out.middleRows(W, s) = fresh;
      break;
  }
  if (n_entries > 0) out.bottomRows(n_entries) = cache.entries(seq, EntryKind::main, n_entries);
  return out;
}

Mat StageProvider::q_latent(const AttentionLayer& l, const Mat& x) const {
  return rounded(l.policy().activations, before_final_rounding::q_latent(l, x));
}

Mat StageProvider::q_heads(const AttentionLayer& l, const Mat& q_latent, int64_t start_pos) const {
  return rounded(l.policy().activations, before_final_rounding::q_heads(l, q_latent, start_pos));
}

Mat StageProvider::window_kv(const AttentionLayer& l, const Mat& x, int64_t start_pos) const {
  return ref::window_kv(l.weights(), x, start_pos, l.rope(), l.config(), l.policy());
}

CompressorOutput StageProvider::compress(const AttentionLayer& l, CompressorKind kind, const Mat& x, int64_t start_pos,
                                         CompressorState& state) const {
  const CompressorWeights& w = kind == CompressorKind::main ? l.weights().compressor : l.weights().indexer.compressor;
  return ref::compress(w, kind, x, start_pos, state, l.rope(), l.config().norm_eps, l.policy());
}

Mat StageProvider::indexer_q(const AttentionLayer& l, const Mat& q_latent, int64_t start_pos) const {
  return ref::indexer_q(l.weights().indexer, q_latent, start_pos, l.rope(), l.config(), l.policy());
}

Mat StageProvider::indexer_weights(const AttentionLayer& l, const Mat& x) const {
  return rounded(l.policy().activations, before_final_rounding::indexer_weights(l, x));
}

Mat StageProvider::indexer_scores(const AttentionLayer& l, const Mat& q, const Mat& weights, const KvCache& cache,
                                  int seq, int64_t start_pos) const {
  return rounded(l.policy().indexer_scores,
                 before_final_rounding::indexer_scores(l, q, weights, cache, seq, start_pos));
}

IndexMat StageProvider::topk_indices(const AttentionLayer&, const Mat& scores, int k, int32_t offset) const {
  return ref::topk_indices(scores, k, offset);
}

IndexMat StageProvider::attention_indices(const AttentionLayer& l, const IndexSpace& space,
                                          const IndexMat& indexer_topk) const {
  return ref::attention_indices(space, l.compress_ratio(), indexer_topk);
}

Mat StageProvider::sparse_mqa(const AttentionLayer& l, const Mat& q, const AttentionKv& kv,
                              const IndexMat& indices) const {
  return rounded(l.policy().activations, before_final_rounding::sparse_mqa(l, q, kv, indices));
}

Mat StageProvider::inverse_rope_heads(const AttentionLayer& l, const Mat& core, int64_t start_pos) const {
  return rounded(l.policy().activations, before_final_rounding::inverse_rope_heads(l, core, start_pos));
}

Mat StageProvider::grouped_wo_a(const AttentionLayer& l, const Mat& out_heads) const {
  return rounded(l.policy().activations, before_final_rounding::grouped_wo_a(l, out_heads));
}

Mat StageProvider::wo_b(const AttentionLayer& l, const Mat& wo_a) const {
  return rounded(l.policy().activations, before_final_rounding::wo_b(l, wo_a));
}

// The softmax scale is head_dim^-1/2 and the sink enters the denominator, unless the policy's
// variant simulates a bug class (another head dim; the sink dropped, i.e. a sink logit of -inf,
// whose term e^(-inf - M) is exactly 0).
SparseMqaOperands sparse_mqa_operands(const AttentionLayer& l, const AttentionKv& kv) {
  const ModelConfig& cfg = l.config();
  const NumericsVariant& v = l.policy().variant;
  int scale_dim = cfg.head_dim;
  switch (v.softmax_scale_dim) {
    case SoftmaxScaleDim::head_dim: break;
    case SoftmaxScaleDim::nope_dim: scale_dim = cfg.nope_dim(); break;
    case SoftmaxScaleDim::rope_dim: scale_dim = cfg.rope_head_dim; break;
    case SoftmaxScaleDim::index_head_dim: scale_dim = cfg.index_head_dim; break;
  }
  return {kv.rows(),
          v.attn_sink ? l.weights().attn_sink : Vec::Constant(cfg.n_heads, -std::numeric_limits<double>::infinity()),
          std::pow(static_cast<double>(scale_dim), -0.5)};
}

namespace before_final_rounding {

Mat q_latent(const AttentionLayer& l, const Mat& x) {
  return q_latent_before_rounding(l.weights(), x, l.config(), l.policy());
}

Mat q_heads(const AttentionLayer& l, const Mat& q_latent, int64_t start_pos) {
  return q_heads_before_rounding(l.weights(), q_latent, start_pos, l.rope(), l.config(), l.policy());
}

Mat indexer_weights(const AttentionLayer& l, const Mat& x) {
  return indexer_weights_before_rounding(l.weights().indexer, x, l.config(), l.policy());
}

Mat indexer_scores(const AttentionLayer& l, const Mat& q, const Mat& weights, const KvCache& cache, int seq,
                   int64_t start_pos) {
  const int ratio = l.compress_ratio();
  const Mat keys = cache.entries(seq, EntryKind::indexer, (start_pos + q.rows()) / ratio);
  return indexer_scores_before_rounding(q, weights, keys, start_pos, ratio, l.policy());
}

Mat sparse_mqa(const AttentionLayer& l, const Mat& q, const AttentionKv& kv, const IndexMat& indices) {
  const SparseMqaOperands o = sparse_mqa_operands(l, kv);
  return sparse_mqa_before_rounding(q, o.kv, o.sink, indices, l.config().n_heads, o.softmax_scale, l.policy());
}

Mat inverse_rope_heads(const AttentionLayer& l, const Mat& core, int64_t start_pos) {
  return inverse_rope_heads_before_rounding(core, start_pos, l.rope(), l.config(), l.policy());
}

Mat grouped_wo_a(const AttentionLayer& l, const Mat& out_heads) {
  return grouped_wo_a_before_rounding(l.weights(), out_heads, l.config(), l.policy());
}

Mat wo_b(const AttentionLayer& l, const Mat& wo_a) { return wo_b_before_rounding(l.weights(), wo_a, l.policy()); }

}  // namespace before_final_rounding

const StageProvider& oracle_stages() {
  static const StageProvider oracle;
  return oracle;
}

}  // namespace dsv4::ref
