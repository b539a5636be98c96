#pragma once
// Shared memory and the producer's work split of v5 (sparse_mqa_v5.cu), host-visible so that the host
// test checks them (test_cuda_attention_host). The q tile and the 2-stage ring of k tiles are v3's
// (v3_layout.cuh: same offsets, same swizzle, same wgmma descriptors); v5 adds a staging area for the
// raw MODEL1 bytes of one decode block and an mbarrier that hands the q tile back to the producer
// between the work units of the persistent grid.
//
// Decode producer, thread t of warpgroup 0 (warp w = t / 32, lane l): token 16w + l % 16 of the
// block, half h = l / 16. It copies (cp.async, 16-byte chunks) FP8 chunks g = 2j + h (j < 14: 16
// codes each) of its token into the staging area and the token's 8 scale bytes into its own 8-byte
// slot; its rope chunks 2i + h (i < 4), bf16 already, go to the k tile through registers. It later
// dequantizes exactly the chunks it copied, so it only waits for its own copies (cp.async.wait_group)
// and no barrier orders the staging area between producer threads.
#include <cstdint>

#include "cuda/attention/v3_layout.cuh"

namespace dsv4::cuda::attention::v5 {

using v3::kStages;
using v3::kTile;

inline constexpr int kFp8ChunksPerToken = 28;  // 448 codes / 16
inline constexpr int kFp8JobsPerThread = 14;   // chunks 2j + h
inline constexpr int kRopeJobsPerThread = 4;   // rope chunks 2i + h (8 dims each)
// A token's FP8 bytes in the staging area: 448 bytes padded to 464 so that the 8 tokens of a
// quarter-warp (lanes 8q .. 8q+7: tokens 8(q%2) .. +7, one chunk) read 8 distinct 16-byte bank groups
// (464 = 29 x 16: token stride odd in 16-byte units).
inline constexpr uint32_t kStageTokenBytes = 464;

// Byte offsets from the 1,024-aligned base of the dynamic shared memory.
struct Plan {
  uint32_t q, k[kStages], raw, scales, mask, full, empty, q_free, total;
};
DSV4_HD constexpr Plan plan() {
  Plan p{};
  p.q = 0;
  for (int s = 0; s < kStages; ++s) p.k[s] = kTile * (1 + s);
  p.raw = kTile * (1 + kStages);                        // [64 tokens][464 B] FP8 codes
  p.scales = p.raw + layout::kRows * kStageTokenBytes;  // [64 tokens][2 halves][8 B] UE8M0
  p.mask = p.scales + layout::kRows * 2 * 8;            // [stages][4] uint16: validity bits
  p.full = p.mask + kStages * 8;                        // [stages] mbarrier: producer -> consumers
  p.empty = p.full + kStages * 8;                       // [stages] mbarrier: consumers -> producer
  p.q_free = p.empty + kStages * 8;                     // mbarrier: consumers are done with q
  p.total = p.q_free + 8;
  return p;
}
DSV4_HD constexpr uint32_t smem_request() { return plan().total + 1024; }

DSV4_HD constexpr int producer_token(int t) { return 16 * (t >> 5) + (t & 15); }
DSV4_HD constexpr int producer_half(int t) { return (t >> 4) & 1; }
DSV4_HD constexpr int fp8_chunk(int j, int half) { return 2 * j + half; }
DSV4_HD constexpr int rope_chunk(int i, int half) { return 2 * i + half; }
// The scale block (64 codes) of FP8 chunk 2j + h is j / 2: a constant of the unrolled job loop.
DSV4_HD constexpr int scale_block(int j) { return j >> 1; }
DSV4_HD constexpr uint32_t raw_offset(int token, int chunk) {
  return static_cast<uint32_t>(token) * kStageTokenBytes + static_cast<uint32_t>(chunk) * 16;
}
DSV4_HD constexpr uint32_t scale_offset(int token, int half) { return static_cast<uint32_t>(2 * token + half) * 8; }

// The persistent grid walks work units u = blockIdx.x, blockIdx.x + gridDim.x, ...; unit u is
// (query row, 64-head group, split) with the split fastest, as v4's block index.
struct Unit {
  int64_t row;
  int group, split;
};
DSV4_HD constexpr Unit unit_of(int u, int groups, int splits) {
  return Unit{u / splits / groups, u / splits % groups, u % splits};
}

static_assert(plan().total + 1024 <= 232448, "v5 shared memory exceeds the 227 KiB a block may have on sm_90");
static_assert(plan().k[0] == v3::plan(0).k[0] && plan().k[1] == v3::plan(0).k[1] && plan().q == v3::plan(0).q,
              "v5's q and k tiles sit where v3's descriptors expect them");
static_assert(
    plan().raw % 16 == 0 && plan().scales % 8 == 0 && plan().mask % 8 == 0 && plan().full % 8 == 0,
    "cp.async destinations 16 / 8-byte aligned, the validity words one 64-bit word, mbarriers 8-byte aligned");
static_assert(kStageTokenBytes % 16 == 0 && (kStageTokenBytes / 16) % 2 == 1, "token stride: odd in 16-byte units");

}  // namespace dsv4::cuda::attention::v5
