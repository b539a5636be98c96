// The oracle backend: each stage is the reference/ function of the same name, with the layer's
// configuration, weights, policy and RoPE table.
#include "verify/replay/backend.h"

#include <cmath>

#include "reference/stages/indexer.h"
#include "reference/stages/output_projection.h"
#include "reference/stages/projections.h"
#include "reference/stages/sparse_mqa.h"
#include "reference/stages/topk.h"

namespace dsv4::verify {

using ref::AttentionLayer;
using ref::IndexMat;
using ref::Mat;

Mat OracleBackend::q_latent(const AttentionLayer& l, const Mat& x) const {
  return ref::q_latent(l.weights(), x, l.config(), l.policy());
}

Mat OracleBackend::q(const AttentionLayer& l, const Mat& q_latent, int64_t start_pos) const {
  return ref::q_heads(l.weights(), q_latent, start_pos, l.rope(), l.config(), l.policy());
}

Mat OracleBackend::kv(const AttentionLayer& l, const Mat& x, int64_t start_pos) const {
  return ref::window_kv(l.weights(), x, start_pos, l.rope(), l.config(), l.policy());
}

ref::CompressorOutput OracleBackend::compress(const AttentionLayer& l, ref::CompressorKind kind, const Mat& x,
                                              int64_t start_pos, ref::CompressorState& state) const {
  const ref::CompressorWeights& w =
      kind == ref::CompressorKind::main ? l.weights().compressor : l.weights().indexer.compressor;
  return ref::compress(w, kind, x, start_pos, state, l.rope(), l.config().norm_eps, l.policy());
}

Mat OracleBackend::indexer_q(const AttentionLayer& l, const Mat& q_latent, int64_t start_pos) const {
  return ref::indexer_q(l.weights().indexer, q_latent, start_pos, l.rope(), l.config(), l.policy());
}

Mat OracleBackend::indexer_weights(const AttentionLayer& l, const Mat& x) const {
  return ref::indexer_weights(l.weights().indexer, x, l.config(), l.policy());
}

Mat OracleBackend::indexer_scores(const AttentionLayer& l, const Mat& q, const Mat& weights, const Mat& keys,
                                  int64_t start_pos) const {
  return ref::indexer_scores(q, weights, keys, start_pos, l.compress_ratio(), l.policy());
}

IndexMat OracleBackend::indexer_topk(const AttentionLayer&, const Mat& scores, int k, int32_t offset) const {
  return ref::topk_indices(scores, k, offset);
}

IndexMat OracleBackend::topk_idxs(const AttentionLayer& l, const ref::IndexSpace& space,
                                  const IndexMat& indexer_topk) const {
  const IndexMat window = ref::window_indices(space);
  switch (l.compress_ratio()) {
    case 4: return ref::concat_indices(window, indexer_topk);
    case 128: return ref::concat_indices(window, ref::hca_indices(space, 128));
    default: return window;
  }
}

Mat OracleBackend::attn_core(const AttentionLayer& l, const Mat& q, const Mat& kv_rows, const IndexMat& indices) const {
  return ref::sparse_mqa(q, kv_rows, l.weights().attn_sink, indices, l.config().n_heads,
                         std::pow(static_cast<double>(l.config().head_dim), -0.5), l.policy());
}

Mat OracleBackend::attn_out_heads(const AttentionLayer& l, const Mat& core, int64_t start_pos) const {
  return ref::inverse_rope_heads(core, start_pos, l.rope(), l.config(), l.policy());
}

Mat OracleBackend::attn_wo_a(const AttentionLayer& l, const Mat& out_heads) const {
  return ref::grouped_wo_a(l.weights(), out_heads, l.config(), l.policy());
}

Mat OracleBackend::out(const AttentionLayer& l, const Mat& wo_a) const { return ref::wo_b(l.weights(), wo_a, l.policy()); }

std::unique_ptr<Backend> make_backend(const std::string& name, const std::string& precision) {
  if (name == "oracle" || name == "cpu") return std::make_unique<OracleBackend>();
  if (name == "cuda") return make_cuda_backend(precision);
  throw std::invalid_argument("backend '" + name + "': expected cpu (the oracle) or cuda");
}

}  // namespace dsv4::verify
