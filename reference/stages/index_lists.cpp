// Window and HCA key lists and their index spaces (docs/math.md "index spaces", "window", "HCA").
#include "reference/stages/index_lists.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dsv4::ref {

IndexSpace IndexSpace::for_call(int64_t start_pos, int64_t seqlen, int window) {
  if (start_pos < 0 || seqlen < 1 || window < 1)
    throw std::invalid_argument("IndexSpace::for_call: expected start_pos >= 0, seqlen >= 1, window >= 1; got " +
                                std::to_string(start_pos) + ", " + std::to_string(seqlen) + ", " +
                                std::to_string(window));
  Kind kind = Kind::chunked;
  if (start_pos == 0)
    kind = Kind::prefill;
  else if (seqlen == 1)
    kind = Kind::decode;
  return IndexSpace{kind, start_pos, seqlen, window};
}

// The row of the kv matrix that holds the window kv of `position`. The matrix holds: prefill, the
// call's positions [0, s); decode, the ring after the write (positions pos-W+1 .. pos); chunked, the
// ring before the call (positions start_pos-W .. start_pos-1) and then the call's positions.
int64_t IndexSpace::raw_row(int64_t position) const {
  const int64_t end = start_pos + seqlen;
  int64_t first = 0;  // oldest position the matrix holds
  switch (kind) {
    case Kind::prefill: first = 0; break;
    case Kind::decode: first = std::max<int64_t>(0, start_pos - window + 1); break;
    case Kind::chunked: first = std::max<int64_t>(0, start_pos - window); break;
  }
  if (position < first || position >= end)
    throw std::out_of_range("IndexSpace::raw_row: position " + std::to_string(position) +
                            " is not held by this call's kv matrix (positions [" + std::to_string(first) + ", " +
                            std::to_string(end) + "))");
  switch (kind) {
    case Kind::prefill: return position;
    case Kind::decode: return position % window;
    case Kind::chunked: return position >= start_pos ? window + (position - start_pos) : position % window;
  }
  return position;
}

int64_t IndexSpace::compressed_offset() const {
  switch (kind) {
    case Kind::prefill: return seqlen;
    case Kind::decode: return window;
    case Kind::chunked: return window + seqlen;
  }
  return 0;
}

int64_t IndexSpace::rows(int64_t n_compressed) const { return compressed_offset() + n_compressed; }

// -> [s, width]. Row i (position t = start_pos + i) lists the rows of positions max(0, t-W+1) .. t,
// oldest first, then -1. This is get_window_topk_idxs in both of DeepSeek's modes: prefill rows are
// positions (width min(s, W)); decode lists ring slots (pos+1) mod W, ..., pos mod W once the ring is
// full, else 0..pos then -1.
IndexMat window_indices(const IndexSpace& space) {
  const int64_t width =
      space.kind == IndexSpace::Kind::prefill ? std::min<int64_t>(space.seqlen, space.window) : space.window;
  IndexMat idx = IndexMat::Constant(space.seqlen, width, -1);
  for (int64_t i = 0; i < space.seqlen; ++i) {
    const int64_t t = space.start_pos + i;
    const int64_t first = std::max<int64_t>(0, t - space.window + 1);
    for (int64_t p = first; p <= t; ++p) idx(i, p - first) = static_cast<int32_t>(space.raw_row(p));
  }
  return idx;
}

// -> [s, (start_pos + s) / r]: entry j (row compressed_offset + j) where j < (t+1)/r, else -1.
// Decode gets [1, (pos+1)/r], every entry visible.
IndexMat hca_indices(const IndexSpace& space, int ratio) {
  if (ratio < 1) throw std::invalid_argument("hca_indices: ratio must be >= 1, got " + std::to_string(ratio));
  const int64_t n_entries = (space.start_pos + space.seqlen) / ratio;
  const int64_t offset = space.compressed_offset();
  IndexMat idx = IndexMat::Constant(space.seqlen, n_entries, -1);
  for (int64_t i = 0; i < space.seqlen; ++i) {
    const int64_t visible = (space.start_pos + i + 1) / ratio;
    for (int64_t j = 0; j < visible; ++j) idx(i, j) = static_cast<int32_t>(offset + j);
  }
  return idx;
}

// [s, Kw] and [s, Kc] -> [s, Kw + Kc]
IndexMat concat_indices(const IndexMat& window, const IndexMat& compressed) {
  if (window.rows() != compressed.rows())
    throw std::invalid_argument("concat_indices: window has " + std::to_string(window.rows()) + " rows, compressed " +
                                std::to_string(compressed.rows()));
  IndexMat idx(window.rows(), window.cols() + compressed.cols());
  idx.leftCols(window.cols()) = window;
  idx.rightCols(compressed.cols()) = compressed;
  return idx;
}

IndexMat attention_indices(const IndexSpace& space, int ratio, const IndexMat& indexer_topk) {
  const IndexMat window = window_indices(space);
  switch (ratio) {
    case 0: return window;
    case 4: return concat_indices(window, indexer_topk);
    case 128: return concat_indices(window, hca_indices(space, ratio));
  }
  throw std::invalid_argument("attention_indices: ratio must be 0, 4 or 128, got " + std::to_string(ratio));
}

}  // namespace dsv4::ref
