#pragma once
// Compressor (model.py Compressor; docs/math.md "compressor"): ratio 4 with overlap (CSA, main
// d = 512 and indexer d = 128) and ratio 128 (HCA). Entry j pools the tokens of block j (and, for
// ratio 4, block j-1 through the "a" channel half) with a per-channel softmax over gate logits
// wgate(x_t) + ape[t mod r]; it is post-processed (RMSNorm, RoPE at position j*r, then FP8 nope
// fake-quant for the main compressor or Hadamard + FP4 for the indexer's) into a cache entry.
//
// Prefill, one-token decode and chunked continuation are one function over an explicit state:
// compress(x_chunk, start_pos, state). Any split of a sequence into calls gives bitwise identical
// entries and state, in every precision policy.
#include <optional>

#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/tensor.h"
#include "reference/weights.h"

namespace dsv4::ref {

// What happens to a pooled entry after the softmax pooling.
enum class CompressorKind {
  main,     // d = 512: RMSNorm, RoPE, FP8 fake-quant of the nope dims (policy.kv_nope)
  indexer,  // d = 128: RMSNorm, RoPE, Hadamard (policy.indexer_hadamard), policy.indexer_qk
};

// DeepSeek's state buffers, per sequence: kv [coff*r, coff*d] (init 0) and score [coff*r, coff*d]
// (init -inf; rows hold gate logit + ape). With overlap (r = 4), rows [0, r) hold the previous
// complete block and rows [r, 2r) the current one; without, rows [0, r) hold the current block.
// A token at position t is written to row offset + t mod r (offset = r with overlap, else 0).
// After a block completes (overlap) rows [r, 2r) are copied to [0, r) and NOT cleared: they are
// overwritten before they are read again, as in DeepSeek's decode.
struct CompressorState {
  int ratio = 0;
  int head_dim = 0;
  Mat kv;
  Mat score;
  static CompressorState fresh(int ratio, int head_dim);  // a new sequence: kv 0, score -inf
  // Rows a reader of DeepSeek's buffers may rely on after `length` tokens of a sequence (rows not
  // listed can hold stale copies): the previous block (overlap, once a block completed) and the
  // rows of the current partial block.
  std::vector<int> meaningful_rows(int64_t length) const;
};

struct CompressorOutput {
  Mat pooled;               // [n_new, d]  softmax-pooled entries, in the policy's fp32 storage
  Mat entries;              // [n_new, d]  post-processed cache entries (as DeepSeek caches them)
  int64_t first_entry = 0;  // index j of the first completed entry (entries are j, j+1, ...)
};

// x [s, dim] (the attention input of positions start_pos .. start_pos+s-1). Updates `state`.
// Precondition: `state` holds this sequence's first start_pos tokens (fresh when start_pos is 0).
// The chunk is walked token by token through the state, as DeepSeek's decode does; overlap block 0
// pools only its own "b" half: its previous rows are the fresh fill (kv 0, score -inf, weight
// exactly 0) whatever the state holds there, as in DeepSeek's prefill.
CompressorOutput compress(const CompressorWeights& w, CompressorKind kind, const Mat& x, int64_t start_pos,
                          CompressorState& state, const RopeTable& rope, double norm_eps, const PrecisionPolicy& p);

// The gate inputs of tokens: kv = wkv(x), score = wgate(x), both [s, coff*d] in fp32 storage.
struct CompressorProjections {
  Mat kv, score;
};
CompressorProjections compressor_projections(const CompressorWeights& w, const Mat& x, const PrecisionPolicy& p);

// The overlap transform of DeepSeek's prefill, [n, r, 2d] -> [n, 2r, d]: rows [r, 2r) of block j are
// its own tokens' "b" half (channels d..2d), rows [0, r) the previous block's "a" half (channels
// 0..d); block 0's previous rows are `fill`. Input blocks as n matrices [r, 2d], output [2r, d].
std::vector<Mat> overlap_transform(const std::vector<Mat>& blocks, double fill);

// Softmax pooling of one entry: per channel c, sum_i kv[i,c] softmax_i(score[:,c]). [m, d] -> [d]
Eigen::RowVectorXd softmax_pool(const Mat& kv, const Mat& score, const PrecisionPolicy& p);

// The post-processing of pooled entries j = first_entry, ... : [n, d] -> [n, d]
Mat postprocess_entries(const CompressorWeights& w, CompressorKind kind, const Mat& pooled, int64_t first_entry,
                        const RopeTable& rope, double norm_eps, const PrecisionPolicy& p);

// Online C128 (sglang's state-saving variant, ratio 128 only): per channel a running max m, sum l
// and normalized mean kv instead of 128 stored rows. Mathematically equal to the stored form; the
// fp32 rounding differs and is bounded by tests.
struct OnlineC128State {
  Eigen::RowVectorXd max, sum, mean;  // [d] each
  static OnlineC128State fresh(int head_dim);
};
// Each step's m', l', mean' are computed in double from the stored state and rounded once to
// p.fp32_tensors. The emitting step (t mod 128 == 127) also updates the state (sglang skips that
// write; the next token resets the state either way).
CompressorOutput compress_online_c128(const CompressorWeights& w, const Mat& x, int64_t start_pos,
                                      OnlineC128State& state, const RopeTable& rope, double norm_eps,
                                      const PrecisionPolicy& p);

}  // namespace dsv4::ref
