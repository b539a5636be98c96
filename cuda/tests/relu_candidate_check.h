#pragma once
// The logits epilogue's one-instruction relu (tile_math.cuh relu_keep_nan: max.NaN.f32 with +0)
// against the oracle's x < 0 ? 0 : x over all 2^32 fp32 bit patterns, on the GPU
// (relu_candidate_check.cu). Non-zero numbers and NaN must agree; the PTX ISA does not say which
// zero max returns for (-0, +0), only the hardware can, and the logits do not depend on it
// (docs/cuda-indexer.md, "Numerics").
#include <cstdint>

namespace dsv4::cuda::testing {

struct ReluCandidateMismatches {
  uint64_t nonzero_differ;  // non-zero, non-NaN inputs where the epilogue's relu differs in any bit
  uint64_t nan_not_kept;    // NaN inputs where it does not give a NaN
  uint64_t zero_sign;       // of -0 and +0: how many it maps to the other zero than the oracle's
};
ReluCandidateMismatches relu_candidate_mismatches();

}  // namespace dsv4::cuda::testing
