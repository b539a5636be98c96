#pragma once
// The grid of a stage's final rounding (docs/tolerances.md section 3): where a rounded value can
// land, which neighbour a value between two grid points goes to (the format's rule, round to
// nearest even), and where the rounding boundaries are. bf16 (from fp32, as the oracle and
// DeepSeek's code round), or the elements of a block quantization with a power-of-two scale
// (FP8 e4m3, FP4 e2m1), whose grid is the element grid times the block's scale.
#include <cstdint>
#include <optional>
#include <string>

#include "reference/numerics/block_quant.h"

namespace dsv4::verify {

// How a stage's values are rounded last, along the last axis of its tensor: the first block_dims
// values of each row (every value when block_dims is 0) block-quantized with `block` (blocks of
// block.block values, one scale each), the rest of the row rounded to bf16 (the whole row without
// a block format). DeepSeek's kv and
// compressor entries: FP8 e4m3 blocks of 64 with UE8M0 scales on the 448 nope dims, bf16 rope dims;
// its indexer q and indexer compressor entries: FP4 e2m1 blocks of 32 with UE8M0 scales on every
// dim; every other bf16 stage: bf16.
struct RoundingFormat {
  std::optional<ref::BlockFormat> block;
  int64_t block_dims = 0;

  static RoundingFormat bf16() { return {}; }
  static RoundingFormat blocks(const ref::BlockFormat& format, int64_t dims = 0) { return {format, dims}; }
  // "bf16", "e4m3/b64/ue8m0 on dims [0,448), bf16 after", "e2m1/b32/ue8m0"
  std::string name() const;
  // The block-quantized dims of a row of `row_length` values (0 without a block format).
  int64_t quantized_dims(int64_t row_length) const { return block ? (block_dims ? block_dims : row_length) : 0; }
  // Throws std::invalid_argument unless the format can be judged on rows of `row_length` values:
  // block_dims within the row and a multiple of the block, and a power-of-two scale rule
  // (ue8m0_ceil or e8m0_floor; the e4m3 and fp32 scales of NVFP4 and fp32_amax have no fixed grid).
  void check(int64_t row_length) const;
};

// One grid: bf16, or an element format times a power-of-two scale.
class Grid {
 public:
  static Grid bf16() { return Grid(std::nullopt, 1.0); }
  static Grid block(ref::Element element, double scale) { return Grid(element, scale); }

  double round(double x) const;      // the grid value the format's rule gives x
  bool contains(double v) const;     // v is a (finite) value of the grid
  int64_t ordinal(double v) const;   // position of a grid value: monotone in v, 0 for +-0
  double at(int64_t ordinal) const;  // the grid value at a position (ordinal's inverse; +0 at 0)
  bool is_tie(double x) const;       // x lies exactly halfway between two grid values
  double scale() const { return scale_; }

 private:
  Grid(std::optional<ref::Element> element, double scale) : element_(element), scale_(scale) {}
  std::optional<ref::Element> element_;  // nullopt: bf16
  double scale_;
};

}  // namespace dsv4::verify
