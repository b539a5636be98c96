#pragma once
// Shared memory and wgmma operand descriptors of v3 (sparse_mqa_v3.cu), host-visible so that the host
// test checks every address the tensor cores will read against the addresses the kernel writes
// (test_cuda_attention_host: an emulation of the descriptor's canonical layout and 128-byte swizzle
// from the PTX ISA's definition, compared element by element with matrix_offset).
//
// Tiles (all bf16, 128-byte swizzled rows as in mma_layout.cuh: 16-byte chunk k of row r at chunk
// position k ^ (r % 8), rows 128 bytes apart, 8-row atoms of 1,024 bytes, 64 dims per 8 KiB tile):
//   q      64 heads x 512 dims   (QK's A, K-major: K = dims)
//   k[s]   64 slots x 512 dims   per pipeline stage; QK's B (K-major: N = slots, K = dims) and PV's
//          B read transposed (MN-major: K = slots, N = dims; the same bytes)
//   p[pl]  64 heads x 64 slots   one tile per probability plane (PV's A, K-major: K = slots)
//
// wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"), 64 bits:
//   bits  0-13  start address >> 4          bits 16-29  leading-dimension byte offset >> 4
//   bits 32-45  stride-dimension byte offset >> 4   bits 49-51  base offset (0: atoms 1,024-aligned)
//   bits 62-63  swizzle: 1 = 128-byte
// Canonical 128-byte-swizzle layouts (T = 8 bf16 = 16 bytes), before the swizzle:
//   K-major   ((8, m), (T, 2k)) : ((8T, SBO), (1, T))   rows 128 B apart, 8-row groups SBO apart;
//             LBO unused (a k16 slice lies inside one 128-byte row); K steps move the start address
//   MN-major  ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))   64 MN-elements per 128-byte row, the
//             next 64 LBO away; 8 K-rows 128 B apart, the next 8 SBO away
// The swizzle XORs address bits 4-6 with bits 7-9 (within each 1,024-byte-aligned atom).
#include <cstdint>

#include "cuda/attention/mma_layout.cuh"

namespace dsv4::cuda::attention::v3 {

inline constexpr int kThreads = 384;  // warpgroup 0: producer; 1, 2: consumers
inline constexpr int kConsumers = 2;
inline constexpr int kStages = 2;                                     // k tiles in flight
inline constexpr int kSlotsPerConsumer = layout::kRows / kConsumers;  // QK: 32 slots each
inline constexpr int kDimsPerConsumer = 512 / kConsumers;             // PV: 256 dims each
inline constexpr uint32_t kTile = layout::kMatrixBytes;               // 64 rows x 512 dims = 64 KiB
inline constexpr uint32_t kPTile = layout::kTileBytes;                // 64 rows x 64 dims = 8 KiB
inline constexpr uint32_t kSbo = 1024;                                // 8 rows x 128 B
inline constexpr uint32_t kLboMn = layout::kTileBytes;                // next 64 dims of a row: next tile

// Byte offsets from the 1,024-aligned base of the dynamic shared memory.
struct Plan {
  uint32_t q, k[kStages], p, xmax, xsum, mask, full, empty, total;
};
DSV4_HD constexpr Plan plan(int planes) {
  Plan p{};
  p.q = 0;
  for (int s = 0; s < kStages; ++s) p.k[s] = kTile * (1 + s);
  p.p = kTile * (1 + kStages);
  p.xmax = p.p + kPTile * planes;         // [2 consumers][64 heads] fp32: block row maxima
  p.xsum = p.xmax + kConsumers * 64 * 4;  // [2 consumers][64 heads] fp32: final row sums
  p.mask = p.xsum + kConsumers * 64 * 4;  // [stages][4] uint16: validity bits, 16 slots each
  p.full = p.mask + kStages * 8;          // [stages] mbarrier: producer -> consumers
  p.empty = p.full + kStages * 8;         // [stages] mbarrier: consumers -> producer
  p.total = p.empty + kStages * 8;
  return p;
}
// What the kernel asks for: the plan plus the slack to round the base up to 1,024 bytes.
DSV4_HD constexpr uint32_t smem_request(int planes) { return plan(planes).total + 1024; }

DSV4_HD constexpr uint64_t descriptor(uint32_t smem_address, uint32_t lbo, uint32_t sbo) {
  return (static_cast<uint64_t>((smem_address & 0x3FFFFu) >> 4)) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFFu) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32) | (uint64_t{1} << 62);
}

// QK, k-step ks (dims 16ks .. 16ks+15, ks in [0, 32)): A = q rows 0..63; B = slots 32c .. 32c+31 of
// a k tile. The start moves 32 bytes per step inside a tile's 128-byte row, 8 KiB per tile.
DSV4_HD constexpr uint32_t k_major_start(uint32_t tile_base, int row0, int ks) {
  return tile_base + static_cast<uint32_t>((ks >> 2) * layout::kTileBytes + row0 * 128 + (ks & 3) * 32);
}
// PV, k-step ks (slots 16ks .. 16ks+15, ks in [0, 4)): A = p tile (K-major, start + 32 B per step);
// B = dims 256c .. 256c+255 of a k tile read MN-major: 16 slots = two 8-row groups from row 16ks.
DSV4_HD constexpr uint32_t mn_major_start(uint32_t tile_base, int n_tile0, int ks) {
  return tile_base + static_cast<uint32_t>(n_tile0 * layout::kTileBytes + ks * 16 * 128);
}

DSV4_HD constexpr uint64_t k_major_desc(uint32_t start) { return descriptor(start, 16, kSbo); }
DSV4_HD constexpr uint64_t mn_major_desc(uint32_t start) { return descriptor(start, kLboMn, kSbo); }

// Byte offset (from the first p tile) of the bf16 probability of (head, slot) in plane `plane`.
DSV4_HD constexpr uint32_t p_element_offset(int plane, int head, int slot) {
  return static_cast<uint32_t>(plane) * kPTile + layout::matrix_offset(head, slot >> 3) +
         static_cast<uint32_t>((slot & 7) * 2);
}

// Accumulator fragment of wgmma m64nNk16 (fp32), thread t of the warpgroup (warp w = t / 32, lane l):
// element 4j + e sits at row 16w + l/4 + 8(e / 2), column 8j + 2(l % 4) + e % 2.
DSV4_HD constexpr int acc_row(int t, int e) { return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((e & 3) >> 1); }
DSV4_HD constexpr int acc_col(int t, int e) { return 8 * (e >> 2) + 2 * (t & 3) + (e & 1); }

// The producer's share of a block: thread t of warpgroup 0 serves token 16(t/32) + (t%32)/2 and half
// h = t % 2 of its bytes: FP8 chunks (16 codes) 2i + h, i < 14, and rope chunks (8 dims) 2i + h, i < 4
// (the two threads of a token read adjacent 16-byte chunks; chunk 2i + h lies in scale block i / 2).
DSV4_HD constexpr int producer_token(int t) { return 16 * (t >> 5) + ((t & 31) >> 1); }
DSV4_HD constexpr int producer_half(int t) { return t & 1; }
// The validity bits of a producer warp's 16 tokens from its ballot (lanes 2i and 2i+1 serve token
// i): bit i of the result = bit 2i of `lanes`.
DSV4_HD constexpr uint32_t even_lane_bits(uint32_t lanes) {
  uint32_t bits = 0;
  for (int i = 0; i < 16; ++i) bits |= ((lanes >> (2 * i)) & 1u) << i;
  return bits;
}
inline constexpr int kFp8ChunksPerThread = 14;  // 448 codes / 16 / 2
inline constexpr int kRopeChunksPerThread = 4;  // 64 dims / 8 / 2
DSV4_HD constexpr int fp8_chunk(int i, int half) { return 2 * i + half; }
DSV4_HD constexpr int rope_chunk(int i, int half) { return 2 * i + half; }

static_assert(plan(3).total + 1024 <= 232448, "v3 shared memory exceeds the 227 KiB a block may have on sm_90");
static_assert(plan(1).p % 1024 == 0 && plan(3).xmax % 1024 == 0 && plan(1).k[1] % 1024 == 0,
              "every wgmma tile starts on a 1,024-byte swizzle atom");
static_assert(plan(1).full % 8 == 0, "mbarriers are 8-byte aligned");

}  // namespace dsv4::cuda::attention::v3
