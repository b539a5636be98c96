// v4: v3 with independent consumers (sm_90a). The producer warpgroup and the 2-stage ring of k tiles
// are v3's (v3_producer.cuh); what changes is the consumers' work per block of 64 slots
// (docs/cuda-attention.md has the design, the measurement that led to it and the prediction):
//
//   v3: consumer c computes S for slots 32c..32c+31, the two exchange their block maxima through
//       shared memory (named barrier), write their halves of P to shared memory (fence, named
//       barrier) and each multiplies all of P by the V dims it owns: the two warpgroups run in
//       lockstep, twice per block, and the tensor cores idle during every softmax.
//   v4: each consumer computes S for all 64 slots (wgmma m64n64k16: the QK work is done twice, the
//       shared-memory reads of q twice as before), its own softmax over the block (the same maxima
//       and sums in both: the same instructions on the same bits), and O = O r + P V for the 256
//       dims it owns with P from its registers (wgmma m64n256k16, A from registers: no p tiles, no
//       proxy fence). The consumers exchange nothing; only the order in which they issue their QK
//       is fixed (ping-pong, two named barriers): consumer 0's QK of block i, then consumer 1's,
//       then consumer 0's of block i + 1 (issued after consumer 1's of block i), so that one's
//       softmax runs while the other's wgmmas use the tensor cores. Each releases the block's stage
//       as soon as its own P V is done (the mbarrier counts both).
// Epilogue as v3, without the exchange of the row sums (each consumer holds the whole sum).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/launchers.h"
#include "cuda/attention/split_combine.cuh"
#include "cuda/attention/v3_producer.cuh"
#include "cuda/attention/v4_pieces.cuh"
#include "cuda/common/cuda_check.h"

namespace dsv4::cuda::attention::detail {
namespace {

using namespace v3;

// Register budgets (setmaxnreg) per warpgroup: the consumers hold O (128), S / P (32) and the
// softmax state; the decode producer holds a token's 74 loaded words, the prefill producer only
// addresses (cp.async), so prefill gives the consumers 8 more.
template <class Params>
struct Budget;
template <>
struct Budget<DecodeParams> {
  static constexpr int producer = 104, consumer = 200;
};
template <>
struct Budget<PrefillParams> {
  static constexpr int producer = 88, consumer = 208;
};
constexpr int kPTiles = 0;  // P lives in the consumers' registers
static_assert(plan(kPTiles).k[1] == kTile * 2, "Block::stage computes the plan's k tiles");
static_assert(plan(kPTiles).mask % 8 == 0, "a stage's four 16-bit validity words are read as one 64-bit word");
// Ping-pong: consumer c syncs on named barrier kTurn + c before issuing a block's QK and, once
// issued, arrives on kTurn + (c ^ 1) (256 threads: the arriving and the syncing warpgroup). Consumer
// 1 arrives on kTurn once before its first block, and consumer 0 syncs on it once after its last
// one, so that every arrival has its sync (no barrier is left half-arrived at exit).
constexpr int kTurn = 2;
static_assert(128 * Budget<DecodeParams>::producer + 256 * Budget<DecodeParams>::consumer <= 384 * 168 &&
                  128 * Budget<PrefillParams>::producer + 256 * Budget<PrefillParams>::consumer <= 384 * 168,
              "the warpgroups' registers fit what a 384-thread block is launched with (168 each)");

template <class Params, int kPlanes>
__device__ void consume(const Params& p, const Block& b, int begin, int end, int64_t row, int head_base, int splits,
                        int split, SplitOut ws) {
  const int c = static_cast<int>(threadIdx.x >> 7) - 1;  // consumer 0 or 1: dims 256c .. 256c+255
  const int t = threadIdx.x & 127;
  const int rows[2] = {acc_row(t, 0), acc_row(t, 2)};  // the two heads this thread's fragments hold

  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  if (c == 1) sm90::named_barrier_arrive(kTurn, 256);

  for (int blk = begin; blk < end; ++blk) {
    const int i = blk - begin, s = i & 1;
    const Stage st = b.stage(s);
    sm90::mbarrier_wait(st.full, (i >> 1) & 1);
    const uint64_t valid = *reinterpret_cast<const uint64_t*>(st.mask);  // bit j: slot j of the block
    if (valid == 0) {                                                    // a block without a valid slot changes nothing
      sm90::mbarrier_arrive(st.empty);
      continue;
    }
    float s_acc[32];
    sm90::named_barrier(kTurn + c, 256);  // the other consumer has issued its previous QK
    v4::qk_block_all(b.base + b.plan.q, st.tile, s_acc, kTurn + (c ^ 1));
    v4::softmax_block(s_acc, valid, p.scale, t, m_run, l_run, o);
    v4::pv_block_regs<kPlanes>(s_acc, st.tile, c, o);
    sm90::mbarrier_arrive(st.empty);
  }
  if (c == 0) sm90::named_barrier(kTurn, 256);  // consumer 1's last arrival

  write_output(p, o, m_run, l_run, row, head_base, split, splits, ws, c, t, rows);
}

template <class Params, int kPlanes>
__global__ void __launch_bounds__(kThreads, 1) sparse_mqa_v4_kernel(Params p, int splits, SplitOut ws) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = mma::smem_addr(smem_raw);
  Block b;
  b.base = (raw + 1023u) & ~1023u;
  b.ptr = smem_raw + (b.base - raw);
  b.plan = plan(kPTiles);

  const int groups = p.n_heads / layout::kRows;
  const int split = static_cast<int>(blockIdx.x % splits);
  const int64_t rest = blockIdx.x / splits;
  const int group = static_cast<int>(rest % groups);
  const int64_t row = rest / groups;
  const int head_base = group * layout::kRows;

  const auto rs = p.row_slots(row);
  const int n_blocks = (rs.total() + layout::kRows - 1) / layout::kRows;
  const int per_split = (n_blocks + splits - 1) / splits;
  const int begin = min(n_blocks, split * per_split);
  const int end = min(n_blocks, begin + per_split);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(b.stage(s).full, 128);   // every producer thread
      sm90::mbarrier_init(b.stage(s).empty, 256);  // every consumer thread
    }
    sm90::fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    sm90::setmaxnreg_dec<Budget<Params>::producer>();
    produce(p, rs, b, begin, end, p.q_row(row, head_base));
  } else {
    sm90::setmaxnreg_inc<Budget<Params>::consumer>();
    consume<Params, kPlanes>(p, b, begin, end, row, head_base, splits, split, ws);
  }
}

template <class Params, int kPlanes>
void launch_kernel(const Params& p, int splits, SplitOut ws, cudaStream_t stream) {
  auto* kernel = sparse_mqa_v4_kernel<Params, kPlanes>;
  const uint32_t smem = smem_request(kPTiles);
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  CUDA_CHECK(attr);
  const int64_t blocks = p.rows() * (p.n_heads / layout::kRows) * splits;
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(p, splits, ws);
  CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    split_combine_kernel<Params><<<static_cast<unsigned>(p.rows() * p.n_heads), 128, 0, stream>>>(p, splits, ws);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_v4(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream) {
  const SplitOut ws = split_views(workspace, p.rows(), p.n_heads, splits);
  if (probs == Probs::bf16)
    launch_kernel<DecodeParams, 1>(p, splits, ws, stream);
  else
    launch_kernel<DecodeParams, 3>(p, splits, ws, stream);
}

void launch_v4(const PrefillParams& p, Probs probs, cudaStream_t stream) {
  if (probs == Probs::bf16)
    launch_kernel<PrefillParams, 1>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
  else
    launch_kernel<PrefillParams, 3>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
}

}  // namespace dsv4::cuda::attention::detail
