#pragma once
// Rotary position embedding (model.py precompute_freqs_cis / apply_rotary_emb).
// Interleaved pairs (x[2i], x[2i+1]) of the LAST rope_dim dims are rotated by angle t * freq_i.
// Compressed layers (ratio 4 / 128) use the YaRN table with base compress_rope_theta; window-only
// layers (ratio 0) use the plain table with base rope_theta. No mscale anywhere in V4.
#include "reference/config.h"
#include "reference/precision.h"
#include "reference/tensor.h"

namespace dsv4::ref {

struct RopeTable {
  int rope_dim = 0;                 // 64
  Vec freqs;                        // [rope_dim / 2]
  Storage storage = Storage::fp32;  // fp32 in official mode: freqs, angle t*freq, cos and sin are fp32

  // YaRN when original_seq_len > 0 (ramp between corr(beta_fast) and corr(beta_slow)), else plain.
  static RopeTable make(int rope_dim, double base, int original_seq_len, double factor, double beta_fast,
                        double beta_slow, Storage storage);
  // The table a layer of this compress ratio uses.
  static RopeTable for_layer(const ModelConfig& cfg, int compress_ratio, const PrecisionPolicy& p);

  // cos/sin of position t for pair i, each rounded to `storage`.
  double cos_at(int64_t t, int i) const;
  double sin_at(int64_t t, int i) const;
};

// Rotates the last table.rope_dim dims of every head of one row in place; the row holds n_heads
// heads of head_dim values each. inverse = rotate by -angle (conjugate). The complex product is
// computed in fp32 storage and the result rounded to the activation storage. p.variant may move
// the position (rope_position_shift) or the pairs (rope_pairs): numerics variants, DeepSeek's by default.
// row [n_heads * head_dim]
void apply_rope(RowRef row, int n_heads, int head_dim, int64_t position, const RopeTable& table, bool inverse,
                const PrecisionPolicy& p);

}  // namespace dsv4::ref
