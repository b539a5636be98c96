#pragma once
// A one-instruction relu for the logits epilogue (docs/cuda-indexer.md "Logits prefill v4": the
// relu is 128 of its 322 instructions a tile, FSETP + FSEL a value): max.NaN.f32 with +0 against
// the oracle's x < 0 ? 0 : x (logits_tile.cuh relu_keep_nan) over all 2^32 fp32 bit patterns, on the
// GPU (relu_candidate_check.cu). The PTX ISA does not say which zero max returns for (-0, +0);
// only the hardware can.
#include <cstdint>

namespace dsv4::cuda::testing {

struct ReluCandidateMismatches {
  uint64_t nonzero_differ;  // non-zero, non-NaN inputs where either operand order differs in any bit
  uint64_t nan_not_kept;    // NaN inputs where either operand order does not give a NaN
  uint64_t zero_first;      // of -0 and +0: how many max.NaN.f32(+0, x) gets wrong (sign of the zero)
  uint64_t zero_second;     // the same for max.NaN.f32(x, +0)
};
ReluCandidateMismatches relu_candidate_mismatches();

}  // namespace dsv4::cuda::testing
