#pragma once
// The compressor entry points' argument checks (cuda/common/launch_checks.h has the shared ones):
// a bad call throws std::invalid_argument naming what, what was expected and what was given, before
// anything is launched.
#include <cstdint>
#include <string>

#include "cuda/common/launch_checks.h"
#include "cuda/compressor/compressor_api.h"

namespace dsv4::cuda::detail {

// ratio: the ratio the launcher implements; max_entry: largest entry index the call writes.
inline void check_params(const CompressorParams& p, int ratio, int plan_ratio, int64_t max_entry, const char* who) {
  const std::string w(who);
  require(p.ratio == ratio, w + ": params.ratio must be " + std::to_string(ratio) + ", got " + std::to_string(p.ratio));
  require(plan_ratio == ratio,
          w + ": the plan was built for ratio " + std::to_string(plan_ratio) + ", expected " + std::to_string(ratio));
  require(takes_head_dim(p.kind, p.head_dim),
          w +
              (p.kind == Kind::main ? ": head_dim must be 128 or 512, got "
                                    : ": the indexer kind needs head_dim 128, got ") +
              std::to_string(p.head_dim));
  require(p.ape && p.norm && p.rope, w + ": ape, norm and rope must be device pointers, got a nullptr");
  require(max_entry < p.rope_entries, w + ": the RoPE table covers entries [0, " + std::to_string(p.rope_entries) +
                                          "), the call writes entry " + std::to_string(max_entry));
}

}  // namespace dsv4::cuda::detail
