#pragma once
// Block fake-quantization: every block of `block` consecutive values along a row is replaced by
// scale * element(clamp(x / scale, +-qmax)). The format is a value, so that a precision policy can
// name DeepSeek's choices (FP8 e4m3 block 64 UE8M0 for the KV nope dims, FP4 e2m1 block 32 UE8M0
// for the indexer) and the alternatives (OCP MXFP4, NVFP4, FP8 per head vector, fp32 scales).
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace dsv4::ref {

enum class Element { e4m3, e2m1 };

enum class ScaleRule {
  ue8m0_ceil,   // DeepSeek: power of two, ceil(log2(max(amax, floor) / qmax))
  ue8m0_floor,  // variant: power of two, floor(log2(max(amax, floor) / qmax)) (the block top saturates)
  e8m0_floor,   // OCP MX: power of two, floor(log2 amax) - emax_elem (may clip the block top)
  nvfp4_e4m3,   // NVFP4: e4m3 block scale amax_block / (qmax * g), g = amax_row / (qmax * 448)
                //        in fp32 (qmax = 6 for e2m1; the row is the span passed in)
  fp32_amax,    // plain fp32 scale max(amax, floor) / qmax (sglang's FP8 indexer)
};

// How a scaled value is rounded onto the element grid. DeepSeek's casts (and every hardware
// conversion it uses) round to nearest, ties to even; the others are numerics variants (bugs seen
// in kernels, docs/math.md "Numerics variants").
enum class ElementRounding {
  nearest_even,
  toward_zero,               // truncation
  nearest_ties_toward_zero,  // to nearest; a tie goes to the smaller magnitude
};

struct BlockFormat {
  BlockFormat() = default;
  BlockFormat(Element e, int block_size, ScaleRule rule) : element(e), block(block_size), scale(rule) {}

  Element element = Element::e4m3;
  int block = 64;
  ScaleRule scale = ScaleRule::ue8m0_ceil;
  ElementRounding rounding = ElementRounding::nearest_even;
  std::optional<float> custom_amax_floor;  // a floor other than the element's (a numerics variant)

  double qmax() const;
  float amax_floor() const;  // custom_amax_floor, else 1e-4 for e4m3, 6 * 2^-126 for e2m1 (DeepSeek's)
  int emax_elem() const;     // exponent of the largest element: 8 for e4m3 (448), 2 for e2m1 (6)
  // "<element>/b<block>/<rule>", e.g. "e4m3/b64/ue8m0", then "/rz" (toward zero) or "/rn-tz" (ties
  // toward zero) and "/floor=<f>" when those are not the defaults.
  std::string name() const;
  bool operator==(const BlockFormat&) const = default;

  static BlockFormat fp8_kv() { return {Element::e4m3, 64, ScaleRule::ue8m0_ceil}; }
  static BlockFormat fp4_indexer() { return {Element::e2m1, 32, ScaleRule::ue8m0_ceil}; }
  static BlockFormat fp8_per_head(int head_dim) { return {Element::e4m3, head_dim, ScaleRule::ue8m0_ceil}; }
  static BlockFormat mxfp4() { return {Element::e2m1, 32, ScaleRule::e8m0_floor}; }
  static BlockFormat nvfp4() { return {Element::e2m1, 16, ScaleRule::nvfp4_e4m3}; }
  static BlockFormat fp8_linear_activation() { return {Element::e4m3, 128, ScaleRule::ue8m0_ceil}; }
};

// Element rounding of the format (RNE, saturating), on an already scaled value: fp8_e4m3_round
// (NaN stays NaN) or fp4_e2m1_round (NaN gives +6, as CUDA's conversion does).
double round_element(Element e, double scaled);
// The same with another rounding rule (saturating alike).
double round_element(Element e, ElementRounding rounding, double scaled);

// The stored scale of one block (amax = max |x| over the block; row_amax only for nvfp4_e4m3):
//   ue8m0_ceil  2^ceil(log2(fp32(max(amax, floor) * fp32(1 / qmax))))       (scale_rules.h)
//   ue8m0_floor 2^floor(log2(fp32(max(amax, floor) * fp32(1 / qmax))))      (scale_rules.h)
//   e8m0_floor  2^(floor(log2 amax) - emax_elem), 2^-127 for amax = 0        (scale_rules.h)
//   nvfp4_e4m3  e4m3(fp32(amax / fp32(qmax * g))), g = tensor_scale(row_amax); a scale that
//               rounds to 0 becomes 1.0 (its block then quantizes to zeros)
//   fp32_amax   fp32(max(amax, floor) / qmax)
double block_scale(const BlockFormat& f, double amax, double row_amax);

// The per-row second-level scale: g = fp32(fp32(row_amax) / (qmax * 448)) for nvfp4_e4m3, 1 for
// every other rule.
double tensor_scale(const BlockFormat& f, double row_amax);

// The value an element q of a block with stored scale `scale` (and tensor scale g) stands for:
// q * scale, exact for the power-of-two rules; fp32(q * scale) for fp32_amax; and
// fp32(q * fp32(scale * g)) for nvfp4_e4m3 (ModelOpt's dequantization order).
double dequantize(const BlockFormat& f, double q, double scale, double tensor_scale);

// Quantize one row to element values and per-block scales; x[i] ~= dequantize(f, q[i],
// scales[i / block], tensor_scale). The element of x is round_element(clamp(x / S, +-qmax)) with
// S = scale (power-of-two rules, x / S exact), S = scale in fp32 with x / S an fp32 division
// (fp32_amax) or S = fp32(scale * g) with x / S an fp32 division (nvfp4_e4m3, ModelOpt's order).
// The amax of a block skips NaN; a NaN element stays NaN (the poison stays visible: on the GPU it
// would depend on how the clamp is lowered). Throws std::invalid_argument when the row length is
// not a multiple of the block or the block is not positive.
struct QuantizedRow {
  std::vector<double> q;       // element values (on the element grid)
  std::vector<double> scales;  // stored scale, one per block
  double tensor_scale = 1.0;   // nvfp4_e4m3: g of the row; 1 otherwise
};
QuantizedRow quantize_row(const BlockFormat& f, std::span<const double> row);

// In place over one row whose length is a multiple of f.block: x = dequantize(quantize(x)), i.e.
// s * element(clamp(x / s, +-qmax)). Throws std::invalid_argument like quantize_row.
void fake_quant_row(const BlockFormat& f, std::span<double> row);

}  // namespace dsv4::ref
