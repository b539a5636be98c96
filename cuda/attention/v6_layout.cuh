#pragma once
// Shared memory of v6 (sparse_mqa_v6.cu), host-visible so that the host test checks it. The q tile
// and the 2-stage ring of k tiles are v3's (v3_layout.cuh: same offsets, same swizzle, same wgmma
// descriptors); v6 adds what its consumers hand each other:
//   p[b]      the probabilities of a block (fp32, consumer 0 -> consumer 1), one buffer per stage b:
//             thread t of a consumer warpgroup holds accumulator elements e < 32 (v3::acc_row /
//             acc_col), stored as float4 j = e / 4 at ((j * 128) + t) * 16: a warp writes (and the
//             same warp of the other consumer reads) 512 consecutive bytes per float4, no bank conflict;
//   row_max[b] the running maximum per head after the block (64 fp32), one buffer per stage: consumer
//             1 computes the block's factor exp(m_old - m_new) from it as softmax_block does;
//   row_sum[u] a work unit's final row sum per head (64 fp32), one buffer per parity of the unit
//             count (consumer 0 writes unit u + 2's only after consumer 1 has read unit u's: the
//             end-of-unit barrier of unit u + 1 lies between).
// v5's staging area of raw MODEL1 bytes does not fit beside the p buffers (227 KiB), so v6's decode
// producer is v4's (FP8 bytes through registers, v3_pieces.cuh).
#include <cstdint>

#include "cuda/attention/v3_layout.cuh"

namespace dsv4::cuda::attention::v6 {

using v3::kStages;
using v3::kTile;

inline constexpr uint32_t kPBuffer = 32 * 128 * 4;  // 32 fp32 per consumer thread = 16 KiB

// Byte offsets from the 1,024-aligned base of the dynamic shared memory.
struct Plan {
  uint32_t q, k[kStages], p[kStages], row_max[kStages], row_sum[2], mask, full, empty, q_free, total;
};
DSV4_HD constexpr Plan plan() {
  Plan pl{};
  pl.q = 0;
  for (int s = 0; s < kStages; ++s) pl.k[s] = kTile * (1 + s);
  for (int s = 0; s < kStages; ++s) pl.p[s] = kTile * (1 + kStages) + kPBuffer * s;
  for (int s = 0; s < kStages; ++s) pl.row_max[s] = pl.p[kStages - 1] + kPBuffer + 64 * 4 * s;
  for (int u = 0; u < 2; ++u) pl.row_sum[u] = pl.row_max[kStages - 1] + 64 * 4 + 64 * 4 * u;
  pl.mask = pl.row_sum[1] + 64 * 4;    // [stages][4] uint16: validity bits
  pl.full = pl.mask + kStages * 8;     // [stages] mbarrier: producer -> consumers
  pl.empty = pl.full + kStages * 8;    // [stages] mbarrier: consumers -> producer
  pl.q_free = pl.empty + kStages * 8;  // mbarrier: consumer 0 is done with q
  pl.total = pl.q_free + 8;
  return pl;
}
DSV4_HD constexpr uint32_t smem_request() { return plan().total + 1024; }

// Where thread t's float4 j (accumulator elements 4j .. 4j + 3) of a p buffer lies.
DSV4_HD constexpr uint32_t p_offset(int j, int t) { return static_cast<uint32_t>(j * 128 + t) * 16; }

static_assert(plan().total + 1024 <= 232448, "v6 shared memory exceeds the 227 KiB a block may have on sm_90");
static_assert(plan().k[0] == v3::plan(0).k[0] && plan().k[1] == v3::plan(0).k[1] && plan().q == v3::plan(0).q,
              "v6's q and k tiles sit where v3's descriptors expect them");
static_assert(plan().p[0] % 16 == 0 && plan().mask % 8 == 0 && plan().full % 8 == 0,
              "float4 p buffers, the validity words one 64-bit word, mbarriers 8-byte aligned");

}  // namespace dsv4::cuda::attention::v6
