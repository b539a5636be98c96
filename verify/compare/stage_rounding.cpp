#include "verify/compare/stage_rounding.h"

#include "reference/stage_registry.h"

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
  // A dense stage held in bf16 (the compressor states are compared on their meaningful rows only,
  // and the index sets as sets): every grid below is reached through that storage.
  const ref::StageDef* s = ref::find_stage(stage);
  if (!s || s->comparison != ref::Comparison::dense || s->storage(policy) != ref::Storage::bf16) return std::nullopt;
  switch (s->id) {
    case ref::Stage::kv:
    case ref::Stage::compressor_entries: return blocks_or_bf16(policy.kv_nope, config.nope_dim());
    case ref::Stage::indexer_q:
    case ref::Stage::indexer_compressor_entries: return blocks_or_bf16(policy.indexer_qk, 0);  // every dim
    default: return RoundingFormat::bf16();
  }
}

}  // namespace dsv4::verify
