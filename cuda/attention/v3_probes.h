#pragma once
// Each piece of v3 and v4 run alone on one block of data (v3_probes.cu), so that a failing v3 / v4
// test points at the broken piece: the wgmma QK tile, the wgmma PV tile (the k tile read transposed;
// v4: P from registers), the producer's gather and dequantization of a decode block (v3's and v4's,
// and v5's), v7's exp (ex2.approx) over its arguments. Test support
// (cuda/tests/test_cuda_attention.cpp), not an API. All pointers are device pointers; matrices row-major.
#include <cstdint>

#include "cuda/attention/kernel_params.cuh"

namespace dsv4::cuda::attention::probes {

// s [64 heads][64 slots] fp32 = q [64][512] . k [64][512]^T (bf16 codes), by the two consumers'
// qk_block (slots 0..31 and 32..63), unscaled.
void v3_qk_tile(const uint16_t* q, const uint16_t* k, float* s);

// o [64 heads][512 dims] fp32 = sum over planes of p[plane] [64][64] . v [64 slots][512] (bf16 codes),
// by the two consumers' pv_block (dims 0..255 and 256..511); planes 1 or 3.
void v3_pv_tile(const uint16_t* p, const uint16_t* v, int planes, float* o);

// Slots 64 blk .. 64 blk + 63 of decode row `row`, gathered and dequantized by the producer ->
// rows [64][512] bf16 codes (the k tile read back unswizzled) and mask [2] (validity bits of slots
// 0..31, 32..63).
void v3_decode_block(const DecodeParams& p, int64_t row, int blk, uint16_t* rows, uint32_t* mask);
// v5: the same block by v5's producer pieces (cp.async into the staging area and the rope into the
// tile, then the packed dequantization shared -> shared), same outputs.
void v5_decode_block(const DecodeParams& p, int64_t row, int blk, uint16_t* rows, uint32_t* mask);

// v4: s [2 consumers][64 heads][64 slots] fp32 = q . k^T, each consumer's qk_block_all over all 64
// slots (the two copies must be equal: v4's consumers rely on computing the same softmax).
void v4_qk_tile(const uint16_t* q, const uint16_t* k, float* s);

// v4: o [64 heads][512 dims] fp32 = P . v, P taken from the consumers' registers by pv_block_regs
// (dims 0..255 and 256..511): prob [64][64] fp32, rounded to one bf16 plane (planes 1) or split
// exactly into three (planes 3).
void v4_pv_tile(const float* prob, const uint16_t* v, int planes, float* o);

// v7: the largest relative error of ex2_approx (ex2.approx.ftz.f32, v4_pieces.cuh) against 2^x in
// double over every fp32 x in [lo, hi] (lo <= hi <= -0 or +0 <= lo <= hi; results normal), and
// ex2_approx(-inf) (v7's masked slots and first rescale rely on +0).
struct Ex2Error {
  double max_rel = 0;
  float worst_x = 0;
  float at_minus_inf = -1;
};
Ex2Error v7_ex2_error(float lo, float hi);

}  // namespace dsv4::cuda::attention::probes
