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
  e8m0_floor,   // OCP MX: power of two, floor(log2 amax) - emax_elem (may clip the block top)
  nvfp4_e4m3,   // NVFP4: e4m3 block scale amax_block / (6 * g), g = amax_row / (6 * 448) in fp32
  fp32_amax,    // plain fp32 scale max(amax, floor) / qmax (sglang's FP8 indexer)
};

struct BlockFormat {
  Element element = Element::e4m3;
  int block = 64;
  ScaleRule scale = ScaleRule::ue8m0_ceil;

  double qmax() const;
  float amax_floor() const;  // 1e-4 for e4m3, 6 * 2^-126 for e2m1 (DeepSeek's floors)
  std::string name() const;  // e.g. "e4m3/b64/ue8m0"

  static BlockFormat fp8_kv() { return {Element::e4m3, 64, ScaleRule::ue8m0_ceil}; }
  static BlockFormat fp4_indexer() { return {Element::e2m1, 32, ScaleRule::ue8m0_ceil}; }
  static BlockFormat fp8_per_head(int head_dim) { return {Element::e4m3, head_dim, ScaleRule::ue8m0_ceil}; }
  static BlockFormat mxfp4() { return {Element::e2m1, 32, ScaleRule::e8m0_floor}; }
  static BlockFormat nvfp4() { return {Element::e2m1, 16, ScaleRule::nvfp4_e4m3}; }
  static BlockFormat fp8_linear_activation() { return {Element::e4m3, 128, ScaleRule::ue8m0_ceil}; }
};

// Element rounding of the format (RNE, saturating), on an already scaled value.
double round_element(Element e, double scaled);

// The scale of one block (amax = max |x| over the block; row_amax only for nvfp4_e4m3).
double block_scale(const BlockFormat& f, double amax, double row_amax);

// In place over one row whose length is a multiple of f.block: x = s * element(clamp(x / s)).
// Throws std::invalid_argument when the length is not a multiple of the block.
void fake_quant_row(const BlockFormat& f, std::span<double> row);

// Quantize one row to element values and per-block scales (x ~= q[i] * scales[i / block]).
struct QuantizedRow {
  std::vector<double> q;       // element values (on the element grid)
  std::vector<double> scales;  // one per block
};
QuantizedRow quantize_row(const BlockFormat& f, std::span<const double> row);

}  // namespace dsv4::ref
