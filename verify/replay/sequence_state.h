#pragma once
// What one sequence keeps between calls during a replay, as plain values (DeepSeek's buffers): the
// window ring, the compressed entries of both compressors and their states. Stage-local replay
// loads a piece from the call's cache/ dataset when the capture has it; otherwise (and always in
// chained replay) it uses what the replay of the earlier calls left here.
#include <cstdint>

#include "reference/config.h"
#include "reference/stages/compressor.h"
#include "reference/stages/index_lists.h"
#include "reference/tensor.h"

namespace dsv4::verify {

struct SequenceState {
  int64_t length = 0;       // positions [0, length) went through it
  ref::Mat ring;            // [W, d]: the window kv of position p in row p mod W; 0 where none reached
  ref::Mat entries;         // [length / r, d]   main compressed entries (ratio != 0)
  ref::Mat indexer_entries; // [length / 4, ID]  the indexer's (ratio 4)
  ref::CompressorState compressor;          // ratio != 0
  ref::CompressorState indexer_compressor;  // ratio 4

  // A new sequence: no positions, ring 0, no entries, fresh compressor states.
  static SequenceState fresh(const ref::ModelConfig& cfg, int ratio);
};

// kv [s, d] of positions start_pos .. start_pos+s-1 into the ring rows (slot = position mod W).
void write_window(ref::Mat& ring, const ref::Mat& kv, int64_t start_pos);

// [a; b] (either may have no rows; both the same width unless one is empty).
ref::Mat stack_rows(const ref::Mat& a, const ref::Mat& b);

// The kv matrix sparse attention reads in the call's index space (reference/stages/index_lists.h):
//   prefill [kv; entries], decode [ring after writing kv; entries], chunked [ring before; kv; entries].
// ring_before [W, d], kv [s, d], entries [(start_pos+s)/r, d] (0 rows for ratio 0) -> [space.rows(n), d]
ref::Mat call_kv_rows(const ref::IndexSpace& space, const ref::Mat& ring_before, const ref::Mat& kv,
                      const ref::Mat& entries);

}  // namespace dsv4::verify
