#pragma once
// Numerics variants: the ways a kernel can compute a stage differently from DeepSeek's code other
// than by rounding (docs/math.md "Numerics variants"). The default value is DeepSeek's arithmetic;
// every other value is a known bug class. A PrecisionPolicy carries one (its `variant`), so the
// oracle can run any stage under a variant: the mutation tests make captures with a bug injected,
// and the replay's diagnosis names the variant that reproduces a failing stage. The rounding
// variants (FP8 truncation, FP4 ties toward zero, UE8M0 floor, amax floors, probabilities not
// rounded, quantization skipped) are values of the policy's formats and storages instead
// (reference/numerics/block_quant.h, precision.h).
#include <string>

namespace dsv4::ref {

// Which dims of a head RoPE rotates, and how it pairs them.
enum class RopePairs {
  last_interleaved,   // DeepSeek: pairs (2i, 2i+1) of the LAST rope_dim dims
  first_interleaved,  // the wrong half: pairs (2i, 2i+1) of the FIRST rope_dim dims
  last_halves,        // the other convention (GPT-NeoX rotate_half): pairs (i, i + rope_dim/2)
};

// The head dim whose -1/2 power scales the attention logits (DeepSeek: head_dim).
enum class SoftmaxScaleDim { head_dim, nope_dim, rope_dim, index_head_dim };

struct NumericsVariant {
  int rope_position_shift = 0;  // RoPE at position t + shift (compressor entries: j*r + shift)
  RopePairs rope_pairs = RopePairs::last_interleaved;
  int ape_shift = 0;     // compressor gate bias ape[(t + shift) mod r] instead of ape[t mod r]
  int causal_shift = 0;  // indexer: entry j visible to token t iff j < (t + 1 + shift) / r
  SoftmaxScaleDim softmax_scale_dim = SoftmaxScaleDim::head_dim;
  bool attn_sink = true;  // false: the sink left out of the softmax denominator

  bool operator==(const NumericsVariant&) const = default;
  bool is_deepseek() const { return *this == NumericsVariant{}; }
  // The switches that differ from DeepSeek's, e.g. "rope_position_shift=+1 attn_sink=off";
  // "" for DeepSeek's arithmetic.
  std::string describe() const;
};

}  // namespace dsv4::ref
