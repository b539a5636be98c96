#pragma once
// The sizes one call implies (docs/capture-format.md, docs/math.md "index spaces"): how many
// compressed entries exist before and after it, how wide its index lists are, and how many rows
// the kv matrix its indices point into has. Every stage shape of the registry is built from these.
#include <cstdint>

#include "reference/config.h"
#include "reference/stages/index_lists.h"

namespace dsv4::ref {

struct CallGeometry {
  const ModelConfig* cfg = nullptr;
  int ratio = 0;          // the layer's compress ratio: 0, 4 or 128
  int64_t batch = 0;      // b
  int64_t seqlen = 0;     // s >= 1
  int64_t start_pos = 0;  // position of the call's first token

  int64_t end_pos() const { return start_pos + seqlen; }
  // prefill (start_pos 0), decode (s 1), or the oracle's chunked continuation (otherwise).
  IndexSpace index_space() const { return IndexSpace::for_call(start_pos, seqlen, cfg->window_size); }
  int coff() const { return ratio == 4 ? 2 : 1; }

  // Compressed entries of ratio r completed before / after the call, and by the call (n_new).
  int64_t entries_before(int r) const { return start_pos / r; }
  int64_t entries_after(int r) const { return end_pos() / r; }
  int64_t new_entries(int r) const { return entries_after(r) - entries_before(r); }

  int64_t indexer_visible() const { return end_pos() / 4; }  // n_visible: columns of indexer/scores
  int64_t indexer_topk() const;                              // k = min(index_topk, n_visible): columns of indexer/topk
  int64_t window_width() const;                              // min(s, W) in prefill, W otherwise
  int64_t compressed_width() const;                          // ratio 4: k; ratio 128: (start_pos+s)/128; ratio 0: 0
  int64_t topk_width() const { return window_width() + compressed_width(); }  // K of topk_idxs
  // Rows of the kv matrix sparse attention reads (the range of topk_idxs / indexer/topk values):
  // prefill s + entries, decode W + entries, chunked W + s + entries (reference/stages/index_lists.h).
  int64_t kv_rows() const;
};

}  // namespace dsv4::ref
