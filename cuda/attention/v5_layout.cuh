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
// v8 (sparse_mqa_v8.cu) splits a block's 64 tokens between the two CTAs of a cluster: 32 tokens a
// producer warpgroup, each served by kParts = 4 threads (warp w: tokens 8w .. 8w+7, part p = l / 8:
// FP8 chunks 4j + p, j < 7, rope chunks 4i + p, i < 2). kParts = 2 is v5's split above.
#include <cstdint>

#include "cuda/attention/v3_layout.cuh"

namespace dsv4::cuda::attention::v5 {

using v3::kStages;
using v3::kTile;

inline constexpr int kFp8ChunksPerToken = 28;  // 448 codes / 16
// Per thread, with kParts threads a token (2: v5's 64 tokens a warpgroup; 4: v8's 32)
template <int kParts = 2>
inline constexpr int kFp8JobsPerThread = kFp8ChunksPerToken / kParts;  // chunks kParts j + part
template <int kParts = 2>
inline constexpr int kRopeJobsPerThread = 8 / kParts;  // rope chunks kParts i + part (8 dims each)
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

// Thread t of the producer warpgroup (warp w, lane l) serves token (32 / kParts) w + l % (32 / kParts) of
// its tokens and part l / (32 / kParts) of that token's chunks.
template <int kParts = 2>
inline constexpr int kTokenLaneBits = kParts == 2 ? 4 : 3;  // log2(32 / kParts)
template <int kParts = 2>
DSV4_HD constexpr int producer_token(int t) {
  static_assert(kParts == 2 || kParts == 4, "v5's split or v8's");
  return (32 / kParts) * (t >> 5) + (t & (32 / kParts - 1));
}
template <int kParts = 2>
DSV4_HD constexpr int producer_half(int t) {
  return (t >> kTokenLaneBits<kParts>)&(kParts - 1);
}
template <int kParts = 2>
DSV4_HD constexpr int fp8_chunk(int j, int half) {
  return kParts * j + half;
}
template <int kParts = 2>
DSV4_HD constexpr int rope_chunk(int i, int half) {
  return kParts * i + half;
}
// The scale block (64 codes, 4 chunks) of FP8 chunk kParts j + part is kParts j / 4: a constant of the
// unrolled job loop.
template <int kParts = 2>
DSV4_HD constexpr int scale_block(int j) {
  return kParts * j / 4;
}
DSV4_HD constexpr uint32_t raw_offset(int token, int chunk) {
  return static_cast<uint32_t>(token) * kStageTokenBytes + static_cast<uint32_t>(chunk) * 16;
}
// Each thread copies its token's 8 scale bytes into its own slot: 64 tokens x 2 parts or 32 x 4.
template <int kParts = 2>
DSV4_HD constexpr uint32_t scale_offset(int token, int half) {
  return static_cast<uint32_t>(kParts * token + half) * 8;
}

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
