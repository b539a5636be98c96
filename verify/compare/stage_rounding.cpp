#include "verify/compare/stage_rounding.h"

#include <array>

namespace dsv4::verify {

namespace {

bool power_of_two_scales(const ref::BlockFormat& f) {
  return f.scale == ref::ScaleRule::ue8m0_ceil || f.scale == ref::ScaleRule::e8m0_floor;
}

// A block-quantized stage: its format over `dims` leading dims (0: all), bf16 after; bf16 alone without one.
std::optional<RoundingFormat> blocks_or_bf16(const std::optional<ref::BlockFormat>& block, int64_t dims) {
  if (!block) return RoundingFormat::bf16();
  if (!power_of_two_scales(*block)) return std::nullopt;
  return RoundingFormat::blocks(*block, dims);
}

}  // namespace

std::optional<RoundingFormat> final_rounding(std::string_view stage, const ref::PrecisionPolicy& policy,
                                             const ref::ModelConfig& config) {
  // Every grid below is reached through the activation storage (a bf16 tensor, or FP8/FP4 values
  // held in one).
  if (policy.activations != ref::Storage::bf16) return std::nullopt;
  static constexpr std::array<std::string_view, 7> kBf16Stages{"q_latent",       "q",         "indexer/weights", "attn/core",
                                                               "attn/out_heads", "attn/wo_a", "out"};
  for (std::string_view s : kBf16Stages)
    if (stage == s) return RoundingFormat::bf16();
  if (stage == "indexer/scores") {
    if (policy.indexer_scores != ref::Storage::bf16) return std::nullopt;
    return RoundingFormat::bf16();
  }
  if (stage == "kv" || stage == "compressor/entries") return blocks_or_bf16(policy.kv_nope, config.nope_dim());
  if (stage == "indexer/q" || stage == "indexer/compressor/entries")
    return blocks_or_bf16(policy.indexer_qk, 0);  // every dim of the row
  return std::nullopt;
}

}  // namespace dsv4::verify
