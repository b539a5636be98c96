#pragma once
// bf16_round_hw2 (the logits epilogue's cvt.rn.bf16x2.f32) against bf16_round over all 2^32 fp32 bit
// patterns, on the GPU (bf16_rounding_check.cu).
#include <cstdint>

namespace dsv4::cuda::testing {

struct Bf16RoundingMismatches {
  uint64_t non_nan_bits_differ;  // non-NaN inputs whose results differ in any bit
  uint64_t nan_not_kept;         // NaN inputs whose hardware result is not a NaN
};
Bf16RoundingMismatches bf16_rounding_mismatches();

}  // namespace dsv4::cuda::testing
