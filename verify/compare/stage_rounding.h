#pragma once
// The final rounding of each stage under a precision policy: the grid compare_rounded judges its
// differences on (verify/compare/rounded.h). For the replay to pass with a stage's reference
// value before that rounding.
#include <optional>
#include <string_view>

#include "reference/config.h"
#include "reference/precision.h"
#include "verify/compare/rounding_grid.h"

namespace dsv4::verify {

// stage: a compared stage name (reference/stage_registry.h). Under `official`:
//   q_latent, q, indexer/weights, indexer/scores, attn/core, attn/out_heads, attn/wo_a, out: bf16;
//   kv, compressor/entries: FP8 e4m3 blocks of 64 (UE8M0) on the nope dims, bf16 rope dims;
//   indexer/q, indexer/compressor/entries: FP4 e2m1 blocks of 32 (UE8M0) on every dim.
// nullopt where there is no grid to judge flips on: fp32 or fp64 storage, the compressor states,
// the index sets, and block formats whose scale is not a power of two (NVFP4, fp32 scales); such a
// stage is compared with compare_dense alone.
std::optional<RoundingFormat> final_rounding(std::string_view stage, const ref::PrecisionPolicy& policy,
                                             const ref::ModelConfig& config);

}  // namespace dsv4::verify
