#include "verify/replay/sequence_state.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dsv4::verify {

SequenceState SequenceState::fresh(const ref::ModelConfig& cfg, int ratio) {
  SequenceState st;
  st.ring = ref::Mat::Zero(cfg.window_size, cfg.head_dim);
  st.entries = ref::Mat(0, cfg.head_dim);
  st.indexer_entries = ref::Mat(0, cfg.index_head_dim);
  if (ratio != 0) st.compressor = ref::CompressorState::fresh(ratio, cfg.head_dim);
  if (ratio == 4) st.indexer_compressor = ref::CompressorState::fresh(4, cfg.index_head_dim);
  return st;
}

void write_window(ref::Mat& ring, const ref::Mat& kv, int64_t start_pos) {
  const int64_t W = ring.rows();
  // Only the last W positions survive; writing the earlier ones first would be overwritten anyway.
  for (int64_t i = std::max<int64_t>(0, kv.rows() - W); i < kv.rows(); ++i) ring.row((start_pos + i) % W) = kv.row(i);
}

ref::Mat stack_rows(const ref::Mat& a, const ref::Mat& b) {
  if (a.rows() == 0) return b;
  if (b.rows() == 0) return a;
  if (a.cols() != b.cols())
    throw std::invalid_argument("stack_rows: widths " + std::to_string(a.cols()) + " and " + std::to_string(b.cols()));
  ref::Mat out(a.rows() + b.rows(), a.cols());
  out.topRows(a.rows()) = a;
  out.bottomRows(b.rows()) = b;
  return out;
}

ref::Mat call_kv_rows(const ref::IndexSpace& space, const ref::Mat& ring_before, const ref::Mat& kv,
                      const ref::Mat& entries) {
  const int64_t W = space.window, s = space.seqlen, offset = space.compressed_offset();
  if (kv.rows() != s || ring_before.rows() != W || kv.cols() != ring_before.cols())
    throw std::invalid_argument("call_kv_rows: expected kv [" + std::to_string(s) + ", d] and ring [" +
                                std::to_string(W) + ", d], got [" + std::to_string(kv.rows()) + ", " +
                                std::to_string(kv.cols()) + "] and [" + std::to_string(ring_before.rows()) + ", " +
                                std::to_string(ring_before.cols()) + "]");
  ref::Mat rows(space.rows(entries.rows()), kv.cols());
  switch (space.kind) {
    case ref::IndexSpace::Kind::prefill:
      rows.topRows(s) = kv;
      break;
    case ref::IndexSpace::Kind::decode: {
      ref::Mat ring = ring_before;
      write_window(ring, kv, space.start_pos);
      rows.topRows(W) = ring;
      break;
    }
    case ref::IndexSpace::Kind::chunked:
      rows.topRows(W) = ring_before;
      rows.middleRows(W, s) = kv;
      break;
  }
  if (entries.rows() > 0) rows.middleRows(offset, entries.rows()) = entries;
  return rows;
}

}  // namespace dsv4::verify
