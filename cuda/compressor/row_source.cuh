#pragma once
// Where the kernels find token t of a sequence during a call that starts at start_pos: a token of
// this call is a row of the ragged input (its logit still needs + ape[t mod r]); an earlier token is
// a row of the sequence's state (logit already gated). Ratio 4: the current block's earlier tokens
// are state rows 4 + t mod 4, the previous block's are rows t mod 4. Ratio 128: rows t mod 128.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/compressor/compressor_api.h"

namespace dsv4::cuda {

struct RowRef {
  const float* kv;     // the row's channel 0
  const float* score;  // the row's channel 0
  bool from_input;     // true: score + ape[t mod r] still to be added
};

// width = coff * d (the row length); state_* point at this sequence's state.
__device__ inline RowRef token_row(const ChunkDesc& ch, int ratio, int64_t t, const float* kv,
                                   const float* score, const float* state_kv, const float* state_score,
                                   int width) {
  if (t >= ch.start_pos) {
    const int64_t row = ch.first_row + (t - ch.start_pos);
    return {kv + row * width, score + row * width, true};
  }
  int srow = static_cast<int>(t % ratio);
  if (ratio == 4 && t >= ch.start_pos / 4 * 4) srow += 4;
  return {state_kv + static_cast<int64_t>(srow) * width, state_score + static_cast<int64_t>(srow) * width, false};
}

}  // namespace dsv4::cuda
