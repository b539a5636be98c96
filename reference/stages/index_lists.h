#pragma once
// The key lists of sparse attention (model.py get_window_topk_idxs / get_compress_topk_idxs) and
// the index spaces they live in (docs/math.md "index spaces").
//
// Sparse attention reads one kv matrix per call whose rows are laid out by an IndexSpace:
//   prefill (start_pos == 0):  [fresh kv of the call (s rows); compressed entries]        (DeepSeek)
//   decode  (s == 1):          [ring buffer after the write (W rows); compressed entries]  (DeepSeek)
//   chunked (otherwise):       [ring buffer before the call (W rows); fresh kv (s rows); compressed]
// The first two are DeepSeek's; the third is the oracle's generalisation to chunked prefill.
#include <cstdint>

#include "reference/tensor.h"

namespace dsv4::ref {

struct IndexSpace {
  enum class Kind { prefill, decode, chunked };
  Kind kind = Kind::prefill;
  int64_t start_pos = 0;
  int64_t seqlen = 0;
  int window = 0;
  static IndexSpace for_call(int64_t start_pos, int64_t seqlen, int window);

  int64_t raw_row(int64_t position) const;   // row holding the window kv of a token position
  int64_t compressed_offset() const;         // row of compressed entry 0
  int64_t rows(int64_t n_compressed) const;  // rows of the kv matrix
};

// Window indices of each query of the call, in the call's index space. -> [s, width]
// prefill: width min(s, W), row i = positions max(0,i-W+1)..; entries > i are -1.
// decode: width W, ring slots oldest..newest (pos >= W-1) or 0..pos then -1 (pos < W-1).
// chunked: width W, rows of positions max(0,t-W+1)..t then -1.
IndexMat window_indices(const IndexSpace& space);

// HCA compressed indices: every complete block j < (t+1)/r, offset applied; -1 elsewhere.
// prefill: [s, s/r]; decode: [1, (pos+1)/r]; chunked: [s, (start_pos+s)/r]
IndexMat hca_indices(const IndexSpace& space, int ratio);

// [window | compressed] per row (DeepSeek concatenates, window first).
IndexMat concat_indices(const IndexMat& window, const IndexMat& compressed);

// The attention's key list of a call (topk_idxs): the window list, then the compressed list of the
// layer's ratio: the indexer's selection indexer_topk [s, k] (ratio 4, offset already applied),
// every complete block (ratio 128), nothing (ratio 0; indexer_topk is ignored for 0 and 128).
// -> [s, K]
IndexMat attention_indices(const IndexSpace& space, int ratio, const IndexMat& indexer_topk);

}  // namespace dsv4::ref
