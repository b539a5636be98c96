#pragma once
// What a rounded stage's differences are made of (verify/compare/rounded.h): every tested value
// that differs from the reference is placed on the grid of the stage's final rounding and
// explained, or not, by the error bound of the reference's value before that rounding.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::verify {

// One differing element, with what judged it.
struct FlipAt {
  int64_t index = -1;  // flat; -1: none
  std::vector<int64_t> coord;
  double ref = 0.0;  // the reference (on its grid)
  double got = 0.0;
  double pre_rounding = 0.0;  // the reference's value before the rounding
  double bound = 0.0;         // the error bound of that value at this element
  double scale = 1.0;         // the block scale of the grid it was placed on (1 for bf16)
  int64_t steps = 0;          // grid steps from ref to got (signed); 0 when off the grid
  std::string why;            // "off the grid", "no rounding boundary within the bound", ...
  bool found() const { return index >= 0; }
};

// One block whose tested values fit no scale the bound allows.
struct BlockScaleAt {
  int64_t row = -1;  // flat row (every axis but the last); -1: none
  std::vector<int64_t> row_coord;
  int64_t block = -1;       // block index within the row
  double ref_scale = 0.0;   // the reference's scale
  double got_scale = NAN;   // the power-of-two scale the tested values fit (NaN: none)
  double amax = 0.0;        // the reference's pre-rounding amax of the block
  double amax_bound = 0.0;  // how far the tested amax may be from it
  bool found() const { return row >= 0; }
};

struct FlipCensus {
  std::string format;                // the grid (RoundingFormat::name())
  int64_t elements = 0;              // finite pairs judged
  int64_t differing = 0;             // tested value != the reference on the tested block scale
  int64_t flips = 0;                 // one grid step away
  int64_t flips_explained = 0;       // ... with a rounding boundary within the bound of the pre-rounding value
  int64_t multi_step = 0;            // more than one grid step away
  int64_t multi_step_explained = 0;  // ... every step within the bound's reach
  int64_t off_grid = 0;              // not a value of the grid at all (e.g. quantization skipped)
  int64_t unexplained = 0;           // differing and not explained (off grid, or out of the bound's reach)
  int64_t ties = 0;                  // pre-rounding values exactly on a rounding boundary
  int64_t tie_flips = 0;             // ... where the tested value is not the one the format's rule gives
  int64_t up = 0, down = 0;          // direction of the differing on-grid values: signed ...
  int64_t toward_zero = 0, away_from_zero = 0;  // ... and in magnitude
  // The more lopsided of the two splits: the two-sided binomial probability of a split at least
  // this uneven if each difference went either way with probability 1/2, and its direction.
  double bias_p_value = 1.0;
  std::string bias_direction;            // "up", "down", "toward zero", "away from zero"; "" when none
  double bias_share = 0.5;               // share of the minority direction of that split
  int64_t blocks = 0;                    // quantization blocks judged
  int64_t block_scales_differ = 0;       // blocks placed on another scale the bound allows
  int64_t block_scales_unexplained = 0;  // blocks whose values fit no allowed scale
  // Measured / allowed of the rounding gate: over the on-grid differences, the largest distance
  // from the pre-rounding value to the farthest rounding boundary the tested value needed (the one
  // between it and its neighbour toward the reference), in units of the element's bound; <= 1
  // where every difference is explained; +inf where one needed a boundary with a zero bound.
  double max_reach = 0.0;
  FlipAt max_reach_at;  // the element reaching it (why: "")
  FlipAt first_unexplained;
  BlockScaleAt first_unexplained_scale;
};

}  // namespace dsv4::verify
