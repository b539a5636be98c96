// One attention layer, in the order of model.py Attention.forward: q path, window kv, index lists
// (indexer with its compressor for CSA, all blocks for HCA), main compressor, sparse attention over
// the call's kv rows (reference/stage_provider.h AttentionKv), inverse RoPE, grouped wo_a, wo_b.
// Every stage runs through the StageProvider; captured inputs come in through StageInputs.
#include "reference/layer.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace dsv4::ref {
namespace {

ModelConfig validated(ModelConfig cfg) {
  cfg.validate();
  return cfg;
}

// Window kv of positions start_pos + first .. start_pos + s - 1 into the ring.
void write_window_rows(const Mat& kv, int64_t start_pos, Index first, KvCache& cache, int seq) {
  for (Index i = first; i < kv.rows(); ++i) cache.write_window(seq, start_pos + i, kv.row(i));
}

}  // namespace

AttentionLayer::AttentionLayer(ModelConfig cfg, AttentionWeights weights, PrecisionPolicy policy)
    : cfg_(validated(std::move(cfg))),
      w_(std::make_shared<const AttentionWeights>(std::move(weights))),
      p_(std::move(policy)) {
  w_->validate(cfg_);
  rope_ = RopeTable::for_layer(cfg_, w_->compress_ratio, p_);
}

// Configuration and weights were validated when the first layer was built.
AttentionLayer::AttentionLayer(ModelConfig cfg, std::shared_ptr<const AttentionWeights> weights, PrecisionPolicy policy)
    : cfg_(std::move(cfg)), w_(std::move(weights)), p_(std::move(policy)) {
  rope_ = RopeTable::for_layer(cfg_, w_->compress_ratio, p_);
}

AttentionLayer AttentionLayer::with_policy(PrecisionPolicy policy) const {
  return AttentionLayer(cfg_, w_, std::move(policy));
}

// x [s, dim] -> every stage of the call; reads and updates the sequence's cache.
StageOutputs AttentionLayer::forward(const Mat& x, int64_t start_pos, KvCache& cache, int seq,
                                     const StageProvider& stages, const StageInputs* inputs) const {
  const int64_t s = x.rows();
  const int ratio = w_->compress_ratio;
  const int W = cfg_.window_size;
  if (x.cols() != cfg_.dim)
    throw std::invalid_argument("AttentionLayer::forward: x has " + std::to_string(x.cols()) +
                                " columns, expected dim = " + std::to_string(cfg_.dim));
  if (s < 1) throw std::invalid_argument("AttentionLayer::forward: x has no tokens");
  if (start_pos < 0 || start_pos + s > cfg_.max_seq_len)
    throw std::invalid_argument("AttentionLayer::forward: positions [" + std::to_string(start_pos) + ", " +
                                std::to_string(start_pos + s) +
                                ") are outside [0, max_seq_len = " + std::to_string(cfg_.max_seq_len) + ")");
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

  // The value of stage `input` that stage `consumer` reads: the replay's where it gives one, else
  // the layer's own.
  auto use = [inputs](Stage input, Stage consumer, const Mat& own) -> const Mat& {
    const Mat* given = inputs ? inputs->dense(input, consumer) : nullptr;
    return given ? *given : own;
  };
  auto use_indices = [inputs](Stage input, Stage consumer, const IndexMat& own) -> const IndexMat& {
    const IndexMat* given = inputs ? inputs->indices(input, consumer) : nullptr;
    return given ? *given : own;
  };
  // Runs a compressor over the call's tokens; the cache keeps the entries `consumer` reads and
  // the state the next call continues from. -> the provider's entries and state after the call.
  auto compress_into_cache = [&](CompressorKind kind, EntryKind entry_kind, Stage entries_stage,
                                 Stage consumer) -> std::pair<Mat, CompressorState> {
    CompressorState& state = cache.compressor_state(seq, entry_kind);
    CompressorOutput out = stages.compress(*this, kind, x, start_pos, state);
    const Mat& used = use(entries_stage, consumer, out.entries);
    for (Index i = 0; i < used.rows(); ++i) cache.write_entry(seq, entry_kind, out.first_entry + i, used.row(i));
    std::pair<Mat, CompressorState> result{std::move(out.entries), state};
    if (const CompressorState* after = inputs ? inputs->state_after(entry_kind) : nullptr) state = *after;
    return result;
  };

  StageOutputs o;
  o.q_latent = stages.q_latent(*this, x);
  o.q = stages.q_heads(*this, use(Stage::q_latent, Stage::q, o.q_latent), start_pos);
  o.kv = stages.window_kv(*this, x, start_pos);

  const IndexSpace space = IndexSpace::for_call(start_pos, s, W);
  const auto offset = static_cast<int32_t>(space.compressed_offset());
  if (ratio == 4) {
    o.indexer_q = stages.indexer_q(*this, use(Stage::q_latent, Stage::indexer_q, o.q_latent), start_pos);
    std::tie(o.indexer_compressor_entries, o.indexer_compressor_state) = compress_into_cache(
        CompressorKind::indexer, EntryKind::indexer, Stage::indexer_compressor_entries, Stage::indexer_scores);
    o.indexer_weights = stages.indexer_weights(*this, x);
    o.indexer_scores = stages.indexer_scores(*this, use(Stage::indexer_q, Stage::indexer_scores, o.indexer_q),
                                             use(Stage::indexer_weights, Stage::indexer_scores, o.indexer_weights),
                                             cache, seq, start_pos);
    const int k = static_cast<int>(std::min<int64_t>(cfg_.index_topk, (start_pos + s) / ratio));
    o.indexer_topk =
        stages.topk_indices(*this, use(Stage::indexer_scores, Stage::indexer_topk, o.indexer_scores), k, offset);
    o.topk_idxs =
        stages.attention_indices(*this, space, use_indices(Stage::indexer_topk, Stage::topk_idxs, o.indexer_topk));
  } else {
    o.topk_idxs = stages.attention_indices(*this, space, IndexMat());
  }

  if (ratio != 0) {
    std::tie(o.compressor_entries, o.compressor_state) =
        compress_into_cache(CompressorKind::main, EntryKind::main, Stage::compressor_entries, Stage::attn_core);
  }

  // Sparse attention over the call's kv rows. A decode call reads its own kv from the ring (written
  // first, as DeepSeek's decode does); prefill and chunked calls read it from the fresh rows and
  // write the ring afterwards (a chunked call reads the ring as it was before the call).
  const Mat& kv = use(Stage::kv, Stage::attn_core, o.kv);
  const bool decode = space.kind == IndexSpace::Kind::decode;
  if (decode) write_window_rows(kv, start_pos, 0, cache, seq);
  const AttentionKv rows{cache, seq, space, kv, ratio == 0 ? 0 : (start_pos + s) / ratio};
  o.attn_core = stages.sparse_mqa(*this, use(Stage::q, Stage::attn_core, o.q), rows,
                                  use_indices(Stage::topk_idxs, Stage::attn_core, o.topk_idxs));
  if (!decode) write_window_rows(kv, start_pos, std::max<int64_t>(0, s - W), cache, seq);

  o.attn_out_heads =
      stages.inverse_rope_heads(*this, use(Stage::attn_core, Stage::attn_out_heads, o.attn_core), start_pos);
  o.attn_wo_a = stages.grouped_wo_a(*this, use(Stage::attn_out_heads, Stage::attn_wo_a, o.attn_out_heads));
  o.out = stages.wo_b(*this, use(Stage::attn_wo_a, Stage::out, o.attn_wo_a));
  return o;
}

// xs[b] [s, dim] for b < batch, all at start_pos -> one StageOutputs per sequence.
std::vector<StageOutputs> AttentionLayer::forward_batch(const std::vector<Mat>& xs, int64_t start_pos, KvCache& cache,
                                                        const StageProvider& stages) const {
  if (xs.empty() || static_cast<int64_t>(xs.size()) > cache.batch())
    throw std::invalid_argument("AttentionLayer::forward_batch: " + std::to_string(xs.size()) +
                                " sequences, the cache holds 1 to " + std::to_string(cache.batch()));
  for (const Mat& x : xs)
    if (x.rows() != xs.front().rows())
      throw std::invalid_argument("AttentionLayer::forward_batch: sequences of " + std::to_string(x.rows()) + " and " +
                                  std::to_string(xs.front().rows()) + " tokens; a batch call has one length");
  std::vector<StageOutputs> out;
  out.reserve(xs.size());
  for (size_t b = 0; b < xs.size(); ++b) out.push_back(forward(xs[b], start_pos, cache, static_cast<int>(b), stages));
  return out;
}

}  // namespace dsv4::ref
