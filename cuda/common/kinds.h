#pragma once
// Enumerations every kernel family shares: which compressed cache a kernel serves, and the
// version of a kernel (the llm.c ladder: v1 is the simplest correct kernel, each later version a
// measured tuning step; docs/cuda-*.md say what each version of a family changes). A family
// implements the versions its docs list; asking for another throws std::invalid_argument.
#include <string>

namespace dsv4::cuda {

// The main attention cache (d = 512 or 128, FP8 nope dims) or the lightning indexer's (d = 128,
// Hadamard + FP4).
enum class Kind { main, indexer };

enum class Variant { v1, v2, v3, v4, v5, v6, v7 };

inline const char* variant_name(Variant v) {
  switch (v) {
    case Variant::v1: return "v1";
    case Variant::v2: return "v2";
    case Variant::v3: return "v3";
    case Variant::v4: return "v4";
    case Variant::v5: return "v5";
    case Variant::v6: return "v6";
    case Variant::v7: return "v7";
  }
  return "?";
}

inline const char* kind_name(Kind k) { return k == Kind::main ? "main" : "indexer"; }

}  // namespace dsv4::cuda
