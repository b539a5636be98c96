#pragma once
// Host-side checks before a launch, shared by every family: a bad call throws
// std::invalid_argument naming who, what was expected and what was given, before anything is
// launched; grid sizes are computed with their limits checked.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/common/kinds.h"

namespace dsv4::cuda::detail {

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// Blocks of `per_block` work items covering n items, as a grid x dimension (at most 2^31 - 1).
inline unsigned grid_blocks(int64_t n, int64_t per_block, const char* who) {
  const int64_t blocks = (n + per_block - 1) / per_block;
  require(n >= 0 && blocks <= 0x7fffffffLL, std::string(who) + ": " + std::to_string(n) + " work items need " +
                                                std::to_string(blocks) + " blocks, more than a grid holds (2^31 - 1)");
  return static_cast<unsigned>(blocks);
}

// A family that implements only some versions says which.
inline void require_variant(bool implemented, Variant v, const char* who, const char* versions) {
  require(implemented,
          std::string(who) + ": version " + variant_name(v) + " is not implemented (versions: " + versions + ")");
}

}  // namespace dsv4::cuda::detail
