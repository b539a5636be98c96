#pragma once
// The index and bit math of the v2 logits kernels (logits_tile.cuh) that host code can check
// (test_cuda_host): e2m1 -> e4m3 unpacking, and which accumulator columns a lane owns after the
// epilogue's exchange across lanes; and the epilogue's relu and hardware bf16 rounding (device only;
// the rounding checked exhaustively by test_cuda_indexer).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/numerics.cuh"  // DSV4_HD

namespace dsv4::cuda::logits_tile {

// __byte_perm(x, y, s) (result byte k = byte (s >> 4k) & 7 of the 8 bytes of y:x); the host form
// computes the same for selector nibbles below 8 (the only ones used here).
DSV4_HD inline uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(x, y, s);
#else
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t out = 0;
  for (int k = 0; k < 4; ++k) out |= static_cast<uint32_t>((bytes >> (8 * ((s >> (4 * k)) & 7u))) & 0xffu) << (8 * k);
  return out;
#endif
}

// Four e2m1 codes (16 bits, element k in bits 4k..4k+3) -> four e4m3 codes (byte k), exactly:
// magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} are e4m3 {0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C};
// the sign moves from bit 3 to bit 7.
DSV4_HD inline uint32_t e2m1x4_to_e4m3x4(uint32_t nibbles) {
  const uint32_t magnitude = byte_perm(0x3C383000u, 0x4C484440u, nibbles & 0x7777u);
  const uint32_t s = nibbles & 0x8888u;
  const uint32_t sign = ((s & 0x8u) << 4) | ((s & 0x80u) << 8) | ((s & 0x800u) << 12) | ((s & 0x8000u) << 16);
  return magnitude | sign;
}

// 16 e2m1 codes (8 packed bytes, element 2i in the low nibble of byte i) -> 16 e4m3 bytes.
DSV4_HD inline uint4 unpack16(uint2 packed) {
  return make_uint4(e2m1x4_to_e4m3x4(packed.x & 0xffffu), e2m1x4_to_e4m3x4(packed.x >> 16),
                    e2m1x4_to_e4m3x4(packed.y & 0xffffu), e2m1x4_to_e4m3x4(packed.y >> 16));
}

// The epilogue's slots: slot c of a lane covers its two accumulator registers of column
// slot_col(c) (4 (c/2) + c%2 and + 2: rows m0 and m0 + 8). Round r (0, 1, 2) of the exchange pairs
// lanes differing in bit 2 + r: a lane keeps the upper half of its current slots when that bit is
// set (kept_half), and adds its partner's copy of them. After the 3 rounds slot k < kSlots / 8 of
// a lane holds the warp's sum of original slot owned_slot(k).
DSV4_HD inline int slot_col(int c, int lane) { return 8 * (c / 2) + 2 * (lane % 4) + c % 2; }
DSV4_HD inline bool kept_upper(int round, int lane) { return (lane >> (2 + round)) & 1; }
template <int kSlots>
DSV4_HD inline int owned_slot(int k, int lane) {
  return k + (kSlots / 2) * ((lane >> 2) & 1) + (kSlots / 4) * ((lane >> 3) & 1) + (kSlots / 8) * ((lane >> 4) & 1);
}

// bf16_round of two values by one hardware conversion (cvt.rn.bf16x2.f32; bf16_bits costs seven
// integer instructions a value, the conversion one issue for both): the same values on every non-NaN
// fp32 input (both round the fp32 bits to nearest even, subnormals kept, overflow to infinity by
// IEEE's unbounded-exponent rule: bf16_bits adds 0x7fff + lsb to the bits, which is that rounding);
// a NaN stays a NaN (payload canonical instead of bf16_bits' quieted one). Used only where the
// results feed arithmetic, never for a stored value. test_cuda_indexer compares it with bf16_round
// on all 2^32 inputs, in both halves.
#ifdef __CUDACC__
// relu as the logits need it, in one instruction (max.NaN.f32 with +0; it was FSETP + FSEL): x for
// x > 0, NaN for NaN, a zero otherwise, as the oracle's x < 0 ? 0 : x (test_cuda_indexer compares
// them on all 2^32 inputs). Which zero it gives for x = -0 is the hardware's and cannot reach a
// logit: a zero term leaves every sum with a non-zero term unchanged, and a sum of zeros becomes +0
// in finish (logits_tile.cuh), as the oracle's head sum, which starts from +0.
__device__ inline float relu_keep_nan(float x) {
  float r;
  asm("max.NaN.f32 %0, %1, 0f00000000;\n" : "=f"(r) : "f"(x));
  return r;
}

__device__ inline void bf16_round_hw2(float a, float b, float& ra, float& rb) {
  uint32_t packed;  // a in the upper half, b in the lower
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(a), "f"(b));
  ra = __uint_as_float(packed & 0xffff0000u);
  rb = __uint_as_float(packed << 16);
}
#endif

}  // namespace dsv4::cuda::logits_tile
