#pragma once
// Shared-memory layout of v2 (sparse_mqa_v2.cu; v3 uses the same tiles, v3_layout.cuh), host-visible
// so that the host test checks the address arithmetic (bijections, bounds, bank spread) without a GPU.
//
// Row matrices (q: 64 heads x 512 dims; k: 64 slots x 512 dims), bf16: eight tiles of 64 dims, a
// tile = 64 rows of 128 bytes; the 16-byte chunk k of row r within a tile sits at chunk position
// k ^ (r % 8). ldmatrix reads 8 consecutive rows at one chunk: the XOR spreads them over all 32
// banks (and it is the layout wgmma's 128-byte swizzle expects of a K-major operand).
//
// S / P: one 416-byte line per head: S = the 64 fp32 logits of the block (256 bytes), P = the bf16
// probabilities, up to three planes of 128 bytes (hi, mid, lo of the fp32 split) at line offsets
// 0, 128, 256, chunk k of plane p at p * 128 + (k ^ (h % 8)) * 16. A head's P overwrites only its
// own S line, so a warp that has read its heads' logits may write their probabilities without
// waiting for the others. 416 = 104 words: the C-fragment stores of S (8 heads x 8 words per
// half-warp) and the ldmatrix reads of P (8 heads at one chunk) both touch 32 distinct banks.
//
// Raw MODEL1 staging (decode): 64 tokens x 576 data bytes, then 64 x 8 scale bytes.
#include <cstdint>

#ifndef DSV4_HD
#ifdef __CUDACC__
#define DSV4_HD __host__ __device__
#else
#define DSV4_HD
#endif
#endif

namespace dsv4::cuda::attention::layout {

inline constexpr int kRows = 64;                             // heads per block, slots per block
inline constexpr int kTileBytes = kRows * 128;               // 64 rows x 64 bf16 dims
inline constexpr int kMatrixBytes = 8 * kTileBytes;          // 64 rows x 512 bf16 dims = 65536
inline constexpr int kLineBytes = 416;                       // S / P line per head
inline constexpr int kSpBytes = kRows * kLineBytes;          // 26624
inline constexpr int kRawDataBytes = kRows * 576;            // 36864
inline constexpr int kRawBytes = kRawDataBytes + kRows * 8;  // 37376

// Byte offset of 16-byte chunk `chunk` (dims 8*chunk .. 8*chunk+7, chunk in [0, 64)) of row `row`.
DSV4_HD constexpr uint32_t matrix_offset(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * kTileBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// Byte offset of fp32 logit `slot` of head `head` in the S / P region.
DSV4_HD constexpr uint32_t s_offset(int head, int slot) { return static_cast<uint32_t>(head * kLineBytes + slot * 4); }

// Byte offset of 16-byte chunk `chunk` (slots 8*chunk .. +7, chunk in [0, 8)) of plane `plane` of head `head`.
DSV4_HD constexpr uint32_t p_offset(int head, int plane, int chunk) {
  return static_cast<uint32_t>(head * kLineBytes + plane * 128 + ((chunk ^ (head & 7)) << 4));
}
// Byte offset of the bf16 probability of `slot` in plane `plane` of head `head`.
DSV4_HD constexpr uint32_t p_element_offset(int head, int plane, int slot) {
  return p_offset(head, plane, slot >> 3) + static_cast<uint32_t>((slot & 7) * 2);
}

// Whole shared-memory plan of one block (bytes from the dynamic shared memory base).
struct Plan {
  uint32_t q, k0, k1, raw0, raw1, sp, state, mask, total;
};

// decode: q, one dequantized k matrix, two raw staging buffers; S / P alias the raw buffer of the
// block being computed (its bytes are dequantized before S is written). prefill: q, two k
// buffers (the next block lands while this one is computed), S / P of their own. The state holds
// the running max, denominator and rescale factor of the 64 heads (3 x 64 fp32), the mask the
// validity bits of two blocks (2 x 2 words).
DSV4_HD constexpr Plan decode_plan() {
  Plan p{};
  p.q = 0;
  p.k0 = p.k1 = kMatrixBytes;
  p.raw0 = 2 * kMatrixBytes;
  p.raw1 = p.raw0 + kRawBytes;
  p.sp = 0xFFFFFFFFu;  // aliases raw0 / raw1
  p.state = p.raw1 + kRawBytes;
  p.mask = p.state + 3 * kRows * 4;
  p.total = p.mask + 16;
  return p;
}
DSV4_HD constexpr Plan prefill_plan() {
  Plan p{};
  p.q = 0;
  p.k0 = kMatrixBytes;
  p.k1 = 2 * kMatrixBytes;
  p.raw0 = p.raw1 = 0xFFFFFFFFu;  // none
  p.sp = 3 * kMatrixBytes;
  p.state = p.sp + kSpBytes;
  p.mask = p.state + 3 * kRows * 4;
  p.total = p.mask + 16;
  return p;
}

}  // namespace dsv4::cuda::attention::layout
