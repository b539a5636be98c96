#pragma once
// The index math of prefill logits v4's epilogue (key_major_tile.cuh) that host code can check
// (test_cuda_indexer_host): one warpgroup's m64n128 accumulator with 64 keys on M and the 64 heads
// of two queries on N (column 64 qi + h). By the wgmma fragment layout (cuda/common/wgmma_layout.h)
// lane l of warp w holds keys 16 w + l/4 + 8 rs (rs = 0, 1) and, of query qi, the heads
// 8 o + 2 (l % 4) + b (octet o = 0..7, b = 0, 1) in register 4 (8 qi + o) + 2 rs + b.
// The head sum keeps v2's tree (logits_tile.cuh head_sum): per key, with head 16 W + r + 8 hi,
// p_r = fma(relu(x_{16W+r+8}), w', relu(x_{16W+r}) w'), then ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7))
// for warp W's heads, then ((S0+S1)+S2)+S3. Lane c = l % 4 of a quad holds both heads of p_{2c}
// and p_{2c+1} (r = 2c + b): it adds those two itself (v2's first round), for each of its 2 keys,
// 2 queries and 4 W: 4 chunks j = 2 rs + qi of 4 values. The quad exchanges them through shared
// memory: lane l keeps chunk kept_chunk(l) (key row rs = l & 1, query qi = (l >> 1) & 1), reads
// it from the quad's 4 lanes and adds (c0 + c1) + (c2 + c3) (v2's second and third rounds), then
// the W in order.
#include "cuda/common/numerics.cuh"  // DSV4_HD

namespace dsv4::cuda::key_major {

inline constexpr int kPairQueries = 2;  // queries on N: 2 x 64 heads = 128 columns
inline constexpr int kKeys = 64;        // keys on M

// The accumulator register of (query qi, head octet o, key row rs, b).
DSV4_HD constexpr int acc_index(int qi, int octet, int rs, int b) { return 4 * (8 * qi + octet) + 2 * rs + b; }
// The head of octet o, b of lane `lane` (any query).
DSV4_HD constexpr int octet_head(int octet, int b, int lane) { return 8 * octet + 2 * (lane % 4) + b; }
// The key (0..63 of the warpgroup's M tile) and the query of the logit lane `lane` of warp `warp`
// holds after the exchange.
DSV4_HD constexpr int out_key(int warp, int lane) { return 16 * warp + lane / 4 + 8 * (lane & 1); }
DSV4_HD constexpr int out_query(int lane) { return (lane >> 1) & 1; }
// The folded head weights of a query pair in shared memory: the 16 a lane reads (of each query,
// heads octet_head(o, b, lane) at 2 o + b) are 64 contiguous bytes, [qi][lane % 4][kWeightStride]
// floats; the stride of 20 puts the 4 lanes' 16-byte loads of a quarter-warp in 4 distinct bank
// groups (the other quad's are the same addresses: a broadcast).
inline constexpr int kWeightStride = 20;
inline constexpr int kWeightFloats = kPairQueries * 4 * kWeightStride;
DSV4_HD constexpr int weight_slot(int qi, int h) {
  return (4 * qi + (h / 2) % 4) * kWeightStride + 2 * (h / 8) + h % 2;
}
// A lane's byte offset into them (its slot of query 0, head octet_head(0, 0, lane)).
DSV4_HD constexpr unsigned weight_base(int lane) { return 4u * static_cast<unsigned>((lane % 4) * kWeightStride); }
// The chunk j = 2 rs + qi a lane keeps.
DSV4_HD constexpr int kept_chunk(int lane) { return 2 * (lane & 1) + ((lane >> 1) & 1); }
// The 16-byte unit of a warp's exchange holding piece `piece` (of `pieces`) of chunk j of lane
// `lane`: chunk-major, the lanes permuted by j so that both the stores (8 lanes, one chunk) and
// the reads (2 quads, 4 chunks of one lane each) of a quarter-warp fall in 8 distinct 16-byte bank
// groups: conflict-free.
DSV4_HD constexpr int exchange_unit(int j, int piece, int pieces, int lane) {
  return (j * pieces + piece) * 32 + (lane ^ j);
}
// The same byte offsets (16 exchange_unit) as the kernel forms them from two per-lane bases and
// one XOR each (valid from a 64-byte aligned base: the XOR touches address bits 4-5 only):
// lane `lane` storing its chunk j, and reading its kept chunk from lane c of its quad.
DSV4_HD constexpr unsigned store_base(int lane) { return 16u * static_cast<unsigned>(lane); }
DSV4_HD constexpr unsigned store_offset(unsigned base, int j, int piece, int pieces) {
  return (base ^ (16u * static_cast<unsigned>(j))) + 512u * static_cast<unsigned>(j * pieces + piece);
}
DSV4_HD constexpr unsigned load_base(int lane, int pieces) {
  return 16u * static_cast<unsigned>((lane & ~3) | kept_chunk(lane)) +
         512u * static_cast<unsigned>(pieces * kept_chunk(lane));
}
DSV4_HD constexpr unsigned load_offset(unsigned base, int c, int piece) {
  return (base ^ (16u * static_cast<unsigned>(c))) + 512u * static_cast<unsigned>(piece);
}

}  // namespace dsv4::cuda::key_major
