// The compressor (docs/math.md "compressor/entries") as one token-by-token state machine.
//
// DeepSeek's code has two paths: prefill (all blocks at once through overlap_transform) and
// one-token decode. Both compute the same mathematics; here every call, whatever its length, walks
// the tokens through the explicit state exactly as DeepSeek's decode does, so prefill, decode one
// by one and any chunked split give bitwise identical entries and state. Prefill-equivalence with
// DeepSeek's prefill path is tested (test_compressor.cpp), including the state layout.
#include "reference/stages/compressor.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/primitives/hadamard.h"
#include "reference/primitives/linear.h"
#include "reference/primitives/rmsnorm.h"
#include "reference/stages/indexer.h"
#include "reference/stages/projections.h"

namespace dsv4::ref {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

std::string shape(Index rows, Index cols) { return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]"; }

void require_shape(const char* what, const Mat& m, Index rows, Index cols) {
  if (m.rows() != rows || m.cols() != cols)
    throw std::invalid_argument(std::string(what) + ": expected shape " + shape(rows, cols) + ", got " +
                                shape(m.rows(), m.cols()));
}

void validate_weights(const CompressorWeights& w) {
  if (w.ratio <= 0 || w.head_dim <= 0)
    throw std::invalid_argument("compressor weights: ratio and head_dim must be positive, got ratio " +
                                std::to_string(w.ratio) + ", head_dim " + std::to_string(w.head_dim));
  const Index width = static_cast<Index>(w.coff()) * w.head_dim;
  require_shape("compressor wgate", w.wgate, width, w.wkv.cols());
  require_shape("compressor wkv", w.wkv, width, w.wkv.cols());
  require_shape("compressor ape", w.ape, w.ratio, width);
  if (w.norm.size() != w.head_dim)
    throw std::invalid_argument("compressor norm: expected size " + std::to_string(w.head_dim) + ", got " +
                                std::to_string(w.norm.size()));
}

void validate_state(const CompressorWeights& w, const CompressorState& state) {
  if (state.ratio != w.ratio || state.head_dim != w.head_dim)
    throw std::invalid_argument("compressor state: expected ratio " + std::to_string(w.ratio) + ", head_dim " +
                                std::to_string(w.head_dim) + " (the weights'), got ratio " +
                                std::to_string(state.ratio) + ", head_dim " + std::to_string(state.head_dim));
  const Index rows = static_cast<Index>(w.coff()) * w.ratio;
  const Index cols = static_cast<Index>(w.coff()) * w.head_dim;
  require_shape("compressor state kv", state.kv, rows, cols);
  require_shape("compressor state score", state.score, rows, cols);
}

void validate_chunk(const CompressorWeights& w, const Mat& x, int64_t start_pos) {
  if (x.cols() != w.wkv.cols())
    throw std::invalid_argument("compressor x: expected " + std::to_string(w.wkv.cols()) +
                                " columns (the model dim), got " + std::to_string(x.cols()));
  if (start_pos < 0) throw std::out_of_range("compressor start_pos: expected >= 0, got " + std::to_string(start_pos));
}

// Entries j = start_pos / r, ... complete inside positions [start_pos, start_pos + s).
int64_t completed_blocks(int64_t start_pos, Index s, int ratio) { return (start_pos + s) / ratio - start_pos / ratio; }

// The 2r pooling rows of the overlap block j that completes now: rows [0, r) the previous block's
// "a" half (channels [0, d) of state rows [0, r)), rows [r, 2r) the current block's "b" half
// (channels [d, 2d) of state rows [r, 2r)). Block 0 has no previous block: its "a" rows are the
// fresh values (kv 0, score -inf) whatever the state holds there, exactly as DeepSeek's prefill
// fills them through overlap_transform (and as its decode reads them from a fresh state).
// A -inf logit next to the finite ones of the current block gets weight exp(-inf - max) = 0.
void overlap_window(const CompressorState& state, int64_t block, Mat& kv, Mat& score) {
  const int r = state.ratio, d = state.head_dim;
  kv.resize(2 * r, d);
  score.resize(2 * r, d);
  if (block == 0) {
    kv.topRows(r).setZero();
    score.topRows(r).setConstant(kMinusInf);
  } else {
    kv.topRows(r) = state.kv.block(0, 0, r, d);
    score.topRows(r) = state.score.block(0, 0, r, d);
  }
  kv.bottomRows(r) = state.kv.block(r, d, r, d);
  score.bottomRows(r) = state.score.block(r, d, r, d);
}

// The token loop shared by compress(): writes each token's kv and gated logit into the state and
// pools every block that completes. proj [s, coff*d] -> pooled [n_new, d] (fp32 storage)
Mat run_state_machine(const CompressorWeights& w, const CompressorProjections& proj, int64_t start_pos,
                      CompressorState& state, const PrecisionPolicy& p) {
  const int r = w.ratio, d = w.head_dim;
  const bool overlap = w.coff() == 2;
  const int offset = overlap ? r : 0;
  const int ape_shift = ((p.variant.ape_shift % r) + r) % r;  // DeepSeek: 0 (a numerics variant otherwise)
  const Index s = proj.kv.rows();
  Mat pooled(completed_blocks(start_pos, s, r), d);
  Index n_done = 0;
  Mat window_kv, window_score;
  for (Index i = 0; i < s; ++i) {
    const int64_t t = start_pos + i;
    const int slot = static_cast<int>(t % r);
    const int ape_row = (slot + ape_shift) % r;
    state.kv.row(offset + slot) = proj.kv.row(i);
    for (Index c = 0; c < state.score.cols(); ++c)
      state.score(offset + slot, c) = round_to(p.fp32_tensors, proj.score(i, c) + w.ape(ape_row, c));
    if (slot != r - 1) continue;
    const int64_t block = t / r;
    if (overlap) {
      overlap_window(state, block, window_kv, window_score);
      pooled.row(n_done++) = softmax_pool(window_kv, window_score, p);
      // The current block becomes the previous one; rows [r, 2r) keep their (now stale) values
      // and are overwritten by the next block's tokens before they are read again.
      state.kv.topRows(r) = state.kv.bottomRows(r);
      state.score.topRows(r) = state.score.bottomRows(r);
    } else {
      pooled.row(n_done++) = softmax_pool(state.kv, state.score, p);
    }
  }
  return pooled;
}

}  // namespace

CompressorState CompressorState::fresh(int ratio, int head_dim) {
  if (ratio <= 0 || head_dim <= 0)
    throw std::invalid_argument("CompressorState::fresh: ratio and head_dim must be positive, got ratio " +
                                std::to_string(ratio) + ", head_dim " + std::to_string(head_dim));
  const int coff = ratio == 4 ? 2 : 1;  // CompressorWeights::coff()
  CompressorState st;
  st.ratio = ratio;
  st.head_dim = head_dim;
  st.kv = Mat::Zero(coff * ratio, coff * head_dim);
  st.score = Mat::Constant(coff * ratio, coff * head_dim, kMinusInf);
  return st;
}

// After `length` tokens, token-by-token and DeepSeek's prefill agree on these rows only: DeepSeek's
// prefill leaves rows [r + length mod r, 2r) at their initial values (kv 0, score -inf), whereas
// the token-by-token machine (like DeepSeek's decode) leaves there a stale copy of the previous
// block, never read before it is overwritten. Before any block completed, the overlap rows [0, r)
// are not read either: block 0 uses the fresh fill in their place.
std::vector<int> CompressorState::meaningful_rows(int64_t length) const {
  if (length < 0)
    throw std::out_of_range("CompressorState::meaningful_rows: expected length >= 0, got " + std::to_string(length));
  const bool overlap = ratio == 4;
  const int offset = overlap ? ratio : 0;
  std::vector<int> rows;
  if (overlap && length >= ratio)
    for (int i = 0; i < ratio; ++i) rows.push_back(i);
  for (int i = 0; i < static_cast<int>(length % ratio); ++i) rows.push_back(offset + i);
  return rows;
}

// x [s, dim] -> kv, score [s, coff*d]. DeepSeek's compressor linears are fp32 (the bf16 checkpoint
// upcast on load) applied to the bf16 input upcast to fp32: products exact, fp32 output.
CompressorProjections compressor_projections(const CompressorWeights& w, const Mat& x, const PrecisionPolicy& p) {
  validate_weights(w);
  validate_chunk(w, x, 0);
  return {linear_exact(x, w.wkv, p.fp32_tensors), linear_exact(x, w.wgate, p.fp32_tensors)};
}

// n blocks [r, 2d] -> n blocks [2r, d]
std::vector<Mat> overlap_transform(const std::vector<Mat>& blocks, double fill) {
  std::vector<Mat> out;
  if (blocks.empty()) return out;
  const Index r = blocks.front().rows(), two_d = blocks.front().cols();
  if (two_d % 2 != 0)
    throw std::invalid_argument("overlap_transform: expected an even channel count (2d), got " + std::to_string(two_d));
  for (const Mat& b : blocks) require_shape("overlap_transform block", b, r, two_d);
  const Index d = two_d / 2;
  out.reserve(blocks.size());
  for (size_t j = 0; j < blocks.size(); ++j) {
    Mat m(2 * r, d);
    if (j == 0)
      m.topRows(r).setConstant(fill);
    else
      m.topRows(r) = blocks[j - 1].leftCols(d);  // previous block, "a" half
    m.bottomRows(r) = blocks[j].rightCols(d);    // own block, "b" half
    out.push_back(std::move(m));
  }
  return out;
}

// kv, score [m, d] -> [d]. DeepSeek computes (kv * score.softmax(dim)).sum(dim) in fp32; here each
// channel is computed in double (max-shifted softmax, then the weighted sum) and rounded once to
// p.fp32_tensors: the correctly rounded value of the same mathematics, since the fp32 operation
// order of a GPU reduction is not part of the contract.
Eigen::RowVectorXd softmax_pool(const Mat& kv, const Mat& score, const PrecisionPolicy& p) {
  require_shape("softmax_pool score", score, kv.rows(), kv.cols());
  if (kv.rows() == 0) throw std::invalid_argument("softmax_pool: expected at least one row, got 0");
  Eigen::RowVectorXd out(kv.cols());
  for (Index c = 0; c < kv.cols(); ++c) {
    double max = kMinusInf;
    for (Index i = 0; i < kv.rows(); ++i) max = std::fmax(max, score(i, c));
    if (max == kMinusInf)
      throw std::invalid_argument("softmax_pool: channel " + std::to_string(c) +
                                  " has no finite logit (every row is -inf)");
    double weight_sum = 0, weighted_kv = 0;
    for (Index i = 0; i < kv.rows(); ++i) {
      const double e = std::exp(score(i, c) - max);
      weight_sum += e;
      weighted_kv += kv(i, c) * e;
    }
    out(c) = round_to(p.fp32_tensors, weighted_kv / weight_sum);
  }
  return out;
}

// pooled [n, d] -> entries [n, d]: kv.to(bf16) -> RMSNorm -> RoPE at position j*r on the last
// rope_dim dims -> main: FP8 fake-quant of the nope dims / indexer: Hadamard, then fake-quant of
// all d dims -> activation storage.
Mat postprocess_entries(const CompressorWeights& w, CompressorKind kind, const Mat& pooled, int64_t first_entry,
                        const RopeTable& rope, double norm_eps, const PrecisionPolicy& p) {
  validate_weights(w);
  require_shape("postprocess_entries pooled", pooled, pooled.rows(), w.head_dim);
  if (first_entry < 0)
    throw std::out_of_range("postprocess_entries first_entry: expected >= 0, got " + std::to_string(first_entry));
  if (rope.rope_dim <= 0 || rope.rope_dim > w.head_dim)
    throw std::invalid_argument("postprocess_entries: rope_dim must be in (0, " + std::to_string(w.head_dim) +
                                "], got " + std::to_string(rope.rope_dim));
  if (pooled.rows() == 0) return Mat(0, w.head_dim);
  Mat kv = pooled;
  round_in_place(p.activations, kv);
  kv = rms_norm(kv, w.norm, norm_eps, p);
  for (Index i = 0; i < kv.rows(); ++i)
    apply_rope(kv.row(i), 1, w.head_dim, (first_entry + i) * w.ratio, rope, false, p);
  if (kind == CompressorKind::main) {
    quantize_kv_nope(kv, rope.rope_dim, p);
  } else {
    if (p.indexer_hadamard) kv = hadamard_rows(kv, w.head_dim, p);
    quantize_indexer_rows(kv, p);
  }
  round_in_place(p.activations, kv);
  return kv;
}

// x [s, dim] -> entries [n_new, d], n_new = (start_pos + s) / r - start_pos / r.
// Precondition: `state` holds the first start_pos tokens of this sequence (fresh when 0).
CompressorOutput compress(const CompressorWeights& w, CompressorKind kind, const Mat& x, int64_t start_pos,
                          CompressorState& state, const RopeTable& rope, double norm_eps, const PrecisionPolicy& p) {
  validate_weights(w);
  validate_state(w, state);
  validate_chunk(w, x, start_pos);
  // One linear call for the chunk: linear is row-independent, so this equals per-token calls.
  const CompressorProjections proj = compressor_projections(w, x, p);
  CompressorOutput out;
  out.first_entry = start_pos / w.ratio;
  out.pooled = run_state_machine(w, proj, start_pos, state, p);
  out.entries = postprocess_entries(w, kind, out.pooled, out.first_entry, rope, norm_eps, p);
  return out;
}

OnlineC128State OnlineC128State::fresh(int head_dim) {
  if (head_dim <= 0)
    throw std::invalid_argument("OnlineC128State::fresh: head_dim must be positive, got " + std::to_string(head_dim));
  OnlineC128State st;
  st.max = Eigen::RowVectorXd::Constant(head_dim, kMinusInf);
  st.sum = Eigen::RowVectorXd::Zero(head_dim);
  st.mean = Eigen::RowVectorXd::Zero(head_dim);
  return st;
}

// x [s, dim] -> entries [n_new, d]. Per channel, one online-softmax step per token:
//   m' = max(m, s),  l' = l e^(m - m') + e^(s - m'),  mean' = (mean l e^(m - m') + kv e^(s - m')) / l'
// each of m', l', mean' computed in double from the stored state and rounded once to
// p.fp32_tensors (mean' divides by the stored l'). The first token of a block (t mod 128 == 0)
// replaces the state by itself (m = s, l = 1, mean = kv); the last (t mod 128 == 127) emits mean'
// as the pooled entry. The state is updated on that step too (sglang skips the write; the next
// token resets it either way), so the state after any split is the same.
CompressorOutput compress_online_c128(const CompressorWeights& w, const Mat& x, int64_t start_pos,
                                      OnlineC128State& state, const RopeTable& rope, double norm_eps,
                                      const PrecisionPolicy& p) {
  validate_weights(w);
  validate_chunk(w, x, start_pos);
  if (w.ratio != 128)
    throw std::invalid_argument("compress_online_c128: expected ratio 128, got " + std::to_string(w.ratio));
  const int d = w.head_dim;
  if (state.max.size() != d || state.sum.size() != d || state.mean.size() != d)
    throw std::invalid_argument("compress_online_c128 state: expected size " + std::to_string(d) + " per vector, got " +
                                std::to_string(state.max.size()) + "/" + std::to_string(state.sum.size()) + "/" +
                                std::to_string(state.mean.size()));
  const CompressorProjections proj = compressor_projections(w, x, p);
  const int r = w.ratio;
  const int ape_shift = ((p.variant.ape_shift % r) + r) % r;  // DeepSeek: 0 (a numerics variant otherwise)
  CompressorOutput out;
  out.first_entry = start_pos / r;
  out.pooled.resize(completed_blocks(start_pos, x.rows(), r), d);
  Index n_done = 0;
  for (Index i = 0; i < x.rows(); ++i) {
    const int64_t t = start_pos + i;
    const int slot = static_cast<int>(t % r);
    const int ape_row = (slot + ape_shift) % r;
    for (int c = 0; c < d; ++c) {
      const double s = round_to(p.fp32_tensors, proj.score(i, c) + w.ape(ape_row, c));
      const double kv = proj.kv(i, c);
      if (slot == 0) {
        state.max(c) = s;
        state.sum(c) = 1;
        state.mean(c) = kv;
        continue;
      }
      const double m_new = std::fmax(state.max(c), s);
      const double keep = std::exp(state.max(c) - m_new);  // e^(m - m'), 0 while m is -inf
      const double add = std::exp(s - m_new);
      const double l_new = round_to(p.fp32_tensors, state.sum(c) * keep + add);
      state.mean(c) = round_to(p.fp32_tensors, (state.mean(c) * state.sum(c) * keep + kv * add) / l_new);
      state.max(c) = m_new;
      state.sum(c) = l_new;
    }
    if (slot == r - 1) out.pooled.row(n_done++) = state.mean;
  }
  out.entries = postprocess_entries(w, CompressorKind::main, out.pooled, out.first_entry, rope, norm_eps, p);
  return out;
}

}  // namespace dsv4::ref
