#pragma once
// The index math of prefill logits v4's epilogue (key_major_tile.cuh) that host code can check
// (test_cuda_indexer_host): one warpgroup's m64n128 accumulator with 64 keys on M and the 64 heads
// of two queries on N (column 64 qi + h). By the wgmma fragment layout (cuda/common/wgmma_layout.h)
// lane l of warp w holds keys 16 w + l/4 + 8 rs (rs = 0, 1) and, of query qi, the heads
// 8 o + 2 (l % 4) + b (octet o = 0..7, b = 0, 1) in register 4 (8 qi + o) + 2 rs + b.
// The head sum keeps v2's tree (logits_tile.cuh head_sum): per key, with head 16 W + r + 8 hi,
// p_r = fma(relu(x_{16W+r+8}), w', relu(x_{16W+r}) w'), then ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7))
// for warp W's heads, then ((S0+S1)+S2)+S3. Lane c = l % 4 of a quad holds both heads of p_{2c}
// and p_{2c+1} (r = 2c + b): it adds those two itself, the quad's exchange across lane bit 0 is
// v2's second round and across lane bit 1 its third; then one lane holds S0..S3 of its key and
// query. After the exchange lane l keeps key row rs = l & 1 and query qi = (l >> 1) & 1.
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

}  // namespace dsv4::cuda::key_major
