// One attention layer, in the order of model.py Attention.forward: q path, window kv, index lists
// (indexer with its compressor for CSA, all blocks for HCA), main compressor, the call's kv matrix
// laid out by its IndexSpace, sparse attention, inverse RoPE, grouped wo_a, wo_b.
#include "reference/layer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "reference/stages/index_lists.h"
#include "reference/stages/indexer.h"
#include "reference/stages/output_projection.h"
#include "reference/stages/projections.h"
#include "reference/stages/sparse_mqa.h"
#include "reference/stages/topk.h"

namespace dsv4::ref {
namespace {

ModelConfig validated(ModelConfig cfg) {
  cfg.validate();
  return cfg;
}

// Runs a compressor over the call's tokens and stores the entries it completes in the cache.
CompressorOutput compress_into_cache(const CompressorWeights& w, CompressorKind kind, EntryKind entry_kind,
                                     const Mat& x, int64_t start_pos, KvCache& cache, int seq,
                                     const RopeTable& rope, double norm_eps, const PrecisionPolicy& p) {
  CompressorOutput out = compress(w, kind, x, start_pos, cache.compressor_state(seq, entry_kind), rope, norm_eps, p);
  for (Index i = 0; i < out.entries.rows(); ++i)
    cache.write_entry(seq, entry_kind, out.first_entry + i, out.entries.row(i));
  return out;
}

// Window kv of positions start_pos + first .. start_pos + s - 1 into the ring.
void write_window_rows(const Mat& kv, int64_t start_pos, Index first, KvCache& cache, int seq) {
  for (Index i = first; i < kv.rows(); ++i) cache.write_window(seq, start_pos + i, kv.row(i));
}

}  // namespace

AttentionLayer::AttentionLayer(ModelConfig cfg, AttentionWeights weights, PrecisionPolicy policy)
    : cfg_(validated(std::move(cfg))), w_(std::move(weights)), p_(std::move(policy)) {
  w_.validate(cfg_);
  rope_ = RopeTable::for_layer(cfg_, w_.compress_ratio, p_);
}

// x [s, dim] -> every stage of the call; reads and updates the sequence's cache.
StageOutputs AttentionLayer::forward(const Mat& x, int64_t start_pos, KvCache& cache, int seq) const {
  const int64_t s = x.rows();
  const int ratio = w_.compress_ratio;
  const int W = cfg_.window_size;
  if (x.cols() != cfg_.dim)
    throw std::invalid_argument("AttentionLayer::forward: x has " + std::to_string(x.cols()) +
                                " columns, expected dim = " + std::to_string(cfg_.dim));
  if (s < 1) throw std::invalid_argument("AttentionLayer::forward: x has no tokens");
  if (start_pos < 0 || start_pos + s > cfg_.max_seq_len)
    throw std::invalid_argument("AttentionLayer::forward: positions [" + std::to_string(start_pos) + ", " +
                                std::to_string(start_pos + s) + ") are outside [0, max_seq_len = " +
                                std::to_string(cfg_.max_seq_len) + ")");
  if (cache.compress_ratio() != ratio)
    throw std::invalid_argument("AttentionLayer::forward: the cache is for ratio " +
                                std::to_string(cache.compress_ratio()) + ", the layer has ratio " +
                                std::to_string(ratio));
  if (seq < 0 || seq >= cache.batch())
    throw std::invalid_argument("AttentionLayer::forward: sequence " + std::to_string(seq) +
                                " is outside the cache's batch [0, " + std::to_string(cache.batch()) + ")");
  if (start_pos == 0) {
    cache.reset(seq);  // a new sequence starts from an empty cache and fresh compressor states
  } else if (cache.length(seq) != start_pos) {
    throw std::invalid_argument("AttentionLayer::forward: start_pos " + std::to_string(start_pos) +
                                " but the cache holds positions [0, " + std::to_string(cache.length(seq)) +
                                ") of sequence " + std::to_string(seq));
  }

  StageOutputs o;
  o.q_latent = q_latent(w_, x, cfg_, p_);
  o.q = q_heads(w_, o.q_latent, start_pos, rope_, cfg_, p_);
  o.kv = window_kv(w_, x, start_pos, rope_, cfg_, p_);

  const IndexSpace space = IndexSpace::for_call(start_pos, s, W);
  const IndexMat window = window_indices(space);
  if (ratio == 4) {
    o.indexer_q = indexer_q(w_.indexer, o.q_latent, start_pos, rope_, cfg_, p_);
    CompressorOutput keys_new = compress_into_cache(w_.indexer.compressor, CompressorKind::indexer,
                                                    EntryKind::indexer, x, start_pos, cache, seq, rope_,
                                                    cfg_.norm_eps, p_);
    o.indexer_compressor_entries = std::move(keys_new.entries);
    o.indexer_weights = indexer_weights(w_.indexer, x, cfg_, p_);
    const int64_t n_keys = (start_pos + s) / ratio;
    const Mat keys = cache.entries(seq, EntryKind::indexer, n_keys);
    o.indexer_scores = indexer_scores(o.indexer_q, o.indexer_weights, keys, start_pos, ratio, p_);
    const int k = static_cast<int>(std::min<int64_t>(cfg_.index_topk, n_keys));
    o.indexer_topk = topk_indices(o.indexer_scores, k, static_cast<int32_t>(space.compressed_offset()));
    o.topk_idxs = concat_indices(window, o.indexer_topk);
  } else if (ratio == 128) {
    o.topk_idxs = concat_indices(window, hca_indices(space, ratio));
  } else {
    o.topk_idxs = window;
  }

  int64_t n_entries = 0;
  if (ratio != 0) {
    CompressorOutput entries_new = compress_into_cache(w_.compressor, CompressorKind::main, EntryKind::main, x,
                                                       start_pos, cache, seq, rope_, cfg_.norm_eps, p_);
    o.compressor_entries = std::move(entries_new.entries);
    n_entries = (start_pos + s) / ratio;
  }

  // The kv matrix sparse attention reads, rows as the IndexSpace lays them out.
  Mat kv_rows(space.rows(n_entries), cfg_.head_dim);
  const Index offset = space.compressed_offset();
  switch (space.kind) {
    case IndexSpace::Kind::prefill:
      kv_rows.topRows(s) = o.kv;
      write_window_rows(o.kv, start_pos, std::max<int64_t>(0, s - W), cache, seq);
      break;
    case IndexSpace::Kind::decode:
      write_window_rows(o.kv, start_pos, 0, cache, seq);
      kv_rows.topRows(W) = cache.ring(seq, start_pos + 1);
      break;
    case IndexSpace::Kind::chunked:
      kv_rows.topRows(W) = cache.ring(seq, start_pos);
      kv_rows.middleRows(W, s) = o.kv;
      write_window_rows(o.kv, start_pos, std::max<int64_t>(0, s - W), cache, seq);
      break;
  }
  if (n_entries > 0) kv_rows.middleRows(offset, n_entries) = cache.entries(seq, EntryKind::main, n_entries);

  o.attn_core = sparse_mqa(o.q, kv_rows, w_.attn_sink, o.topk_idxs, cfg_.n_heads,
                           std::pow(static_cast<double>(cfg_.head_dim), -0.5), p_);
  o.attn_out_heads = inverse_rope_heads(o.attn_core, start_pos, rope_, cfg_, p_);
  o.attn_wo_a = grouped_wo_a(w_, o.attn_out_heads, cfg_, p_);
  o.out = wo_b(w_, o.attn_wo_a, p_);

  if (ratio != 0) o.compressor_state = cache.compressor_state(seq, EntryKind::main);
  if (ratio == 4) o.indexer_compressor_state = cache.compressor_state(seq, EntryKind::indexer);
  return o;
}

// xs[b] [s, dim] for b < batch, all at start_pos -> one StageOutputs per sequence.
std::vector<StageOutputs> AttentionLayer::forward_batch(const std::vector<Mat>& xs, int64_t start_pos,
                                                        KvCache& cache) const {
  if (xs.empty() || static_cast<int64_t>(xs.size()) > cache.batch())
    throw std::invalid_argument("AttentionLayer::forward_batch: " + std::to_string(xs.size()) +
                                " sequences, the cache holds 1 to " + std::to_string(cache.batch()));
  for (const Mat& x : xs)
    if (x.rows() != xs.front().rows())
      throw std::invalid_argument("AttentionLayer::forward_batch: sequences of " + std::to_string(x.rows()) +
                                  " and " + std::to_string(xs.front().rows()) +
                                  " tokens; a batch call has one length");
  std::vector<StageOutputs> out;
  out.reserve(xs.size());
  for (size_t b = 0; b < xs.size(); ++b) out.push_back(forward(xs[b], start_pos, cache, static_cast<int>(b)));
  return out;
}

}  // namespace dsv4::ref
