// Projections in fixed row chunks and W panels (see linear.h). Why a token's result cannot depend
// on the chunk it lands in: every (chunk, panel) task is one Eigen GEMM whose shape
// [kLinearRowChunk, K] x [K, panel width] depends on K and N only, so Eigen picks the same blocking
// and micro-kernels wherever the token is; the chunk's rows (the GEMM's columns, as Eigen evaluates
// a row-major product transposed) all fall in the kernel's full-width column path because
// kLinearRowChunk is a multiple of its register-block width (4, or 8 with AVX-512); and zero
// padding rows never mix with real ones. test_primitives checks this bitwise for every row
// position and for one and two threads.
// Across hosts: Eigen sizes its K blocking from the L1 cache, so the fp64 summation grouping of
// linear_exact may differ between machines in the last bits of a double (linear_fp8_block128's
// block sums are exact, so it cannot).
#include "reference/primitives/linear.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>

#include "reference/numerics/fp8_e4m3.h"
#include "reference/numerics/scale_rules.h"
#include "reference/parallel.h"

namespace dsv4::ref {

namespace {

void check_shapes(const char* what, const Mat& x, const Mat& W) {
  if (W.cols() != x.cols())
    throw std::invalid_argument(std::string(what) + ": W is [" + std::to_string(W.rows()) + ", " +
                                std::to_string(W.cols()) + "], expected [N, " + std::to_string(x.cols()) +
                                "] to match x's K");
}

// One task of a projection: rows [first, first + rows) of x (rows <= kLinearRowChunk) against
// rows [n0, n0 + nn) of W (nn <= kLinearColumnPanel).
struct Tile {
  Index first, rows, n0, nn;
};

// Runs body(tile) for every (row chunk, W panel) pair of an [M, N] output, in parallel, panel by
// panel.
template <typename Body>
void for_each_tile(Index M, Index N, Body&& body) {
  const Index chunks = (M + kLinearRowChunk - 1) / kLinearRowChunk;
  const Index panels = (N + kLinearColumnPanel - 1) / kLinearColumnPanel;
  parallel_for(chunks * panels, [&](int64_t task) {
    const Index chunk = task % chunks;
    const Index panel = task / chunks;
    const Index first = chunk * kLinearRowChunk;
    const Index n0 = panel * kLinearColumnPanel;
    body(Tile{first, std::min(kLinearRowChunk, M - first), n0, std::min(kLinearColumnPanel, N - n0)});
  });
}

// Rows for a whole number of chunks: the real rows, then zeros. M -> ceil(M / chunk) * chunk
Index padded_rows(Index M) { return (M + kLinearRowChunk - 1) / kLinearRowChunk * kLinearRowChunk; }

}  // namespace

// x [M, K], W [N, K] -> [M, N]
Mat linear_exact(const Mat& x, const Mat& W, Storage out) {
  check_shapes("linear_exact", x, W);
  Mat padded = Mat::Zero(padded_rows(x.rows()), x.cols());
  padded.topRows(x.rows()) = x;
  Mat y(x.rows(), W.rows());
  for_each_tile(x.rows(), W.rows(), [&](const Tile& t) {
    Mat product(kLinearRowChunk, t.nn);
    product.noalias() = padded.middleRows(t.first, kLinearRowChunk) * W.middleRows(t.n0, t.nn).transpose();
    auto dst = y.block(t.first, t.n0, t.rows, t.nn);
    dst = product.topRows(t.rows);
    round_in_place(out, dst);
  });
  return y;
}

// x [M, K], W [N, K] -> [M, N]
// C[m, n] = sum_kb fp32( sum_{k in kb} a_q[m, k] W[n, k] ) * sa[m, kb], accumulated in fp32.
// Each K block's partial sum is exact in double: a_q is an e4m3 value (a multiple of 2^-9, below
// 2^9) and W[n, kb] an e4m3 value times the power-of-two block scale 2^e (a multiple of 2^(e-9),
// below 2^(e+9)), so every product is a multiple of 2^(e-18) below 2^(e+18) and the 128-term sum
// is below 2^(e+25): at most 43 significant bits, within the 53 of a double, in any order. The
// rounding to fp32 of that exact sum is then the correctly rounded block partial; multiplying by
// the power-of-two activation scale sa is exact.
Mat linear_fp8_block128(const Mat& x, const Mat& W, Storage out) {
  check_shapes("linear_fp8_block128", x, W);
  constexpr Index kBlock = 128;
  const Index M = x.rows();
  const Index K = x.cols();
  if (K % kBlock != 0)
    throw std::invalid_argument("linear_fp8_block128: K = " + std::to_string(K) + ", expected a multiple of 128");
  const Index k_blocks = K / kBlock;

  // act_quant(x, 128): e4m3 element values a_q (zero padded to whole chunks) and one
  // power-of-two scale per row and K block.
  const BlockFormat format = BlockFormat::fp8_linear_activation();
  Mat a_q = Mat::Zero(padded_rows(M), K);
  Mat sa(M, k_blocks);
  parallel_for(M, [&](int64_t m) {
    const QuantizedRow q = quantize_row(format, std::span<const double>(x.row(m).data(), K));
    a_q.row(m) = Eigen::Map<const Eigen::RowVectorXd>(q.q.data(), K);
    sa.row(m) = Eigen::Map<const Eigen::RowVectorXd>(q.scales.data(), k_blocks);
  });

  const auto f32 = [](double v) { return round_to(Storage::fp32, v); };
  Mat y(M, W.rows());
  for_each_tile(M, W.rows(), [&](const Tile& t) {
    Mat acc = Mat::Zero(t.rows, t.nn);  // the fp32 accumulator
    // partial sums of one K block; added to (+=) and reset while they are consumed, which saves
    // the zeroing pass that `=` would make
    Mat partial = Mat::Zero(kLinearRowChunk, t.nn);
    for (Index kb = 0; kb < k_blocks; ++kb) {
      partial.noalias() += a_q.block(t.first, kb * kBlock, kLinearRowChunk, kBlock) *
                           W.block(t.n0, kb * kBlock, t.nn, kBlock).transpose();
      for (Index r = 0; r < kLinearRowChunk; ++r) {
        double* block_sum = partial.row(r).data();
        if (r < t.rows) {
          const double scale = sa(t.first + r, kb);
          double* sum = acc.row(r).data();
          for (Index n = 0; n < t.nn; ++n) sum[n] = f32(sum[n] + f32(block_sum[n]) * scale);
        }
        std::fill(block_sum, block_sum + t.nn, 0.0);
      }
    }
    round_in_place(out, acc);
    y.block(t.first, t.n0, t.rows, t.nn) = acc;
  });
  return y;
}

Mat linear_fp8_weight(const Mat& x, const Mat& W, const PrecisionPolicy& p) {
  switch (p.fp8_linears) {
    case LinearKind::exact: return linear_exact(x, W, p.activations);
    case LinearKind::fp8_block128: return linear_fp8_block128(x, W, p.activations);
  }
  throw std::invalid_argument("linear_fp8_weight: unknown LinearKind");
}

// W [N, K] -> [N, K]
// Per 128x128 block (edge blocks may be smaller): s = 2^ceil(log2(max(amax, 1e-4) / 448)) by the
// UE8M0 rule of act_quant, values e4m3(W / s) * s.
Mat fp8_weight_fake_quant(const Mat& W) {
  constexpr Index kBlock = 128;
  const BlockFormat format{Element::e4m3, static_cast<int>(kBlock), ScaleRule::ue8m0_ceil};
  const auto qmax = static_cast<float>(format.qmax());
  const float floor = format.amax_floor();
  const Index row_blocks = (W.rows() + kBlock - 1) / kBlock;
  const Index col_blocks = (W.cols() + kBlock - 1) / kBlock;
  Mat q(W.rows(), W.cols());
  parallel_for(row_blocks, [&](int64_t rb) {
    const Index r0 = rb * kBlock;
    const Index nr = std::min(kBlock, W.rows() - r0);
    for (Index cb = 0; cb < col_blocks; ++cb) {
      const Index c0 = cb * kBlock;
      const Index nc = std::min(kBlock, W.cols() - c0);
      const auto block = W.block(r0, c0, nr, nc);
      const double amax = block.cwiseAbs().maxCoeff();
      const double s = std::ldexp(1.0, ue8m0_ceil_exponent(static_cast<float>(amax), floor, qmax));
      q.block(r0, c0, nr, nc) = block.unaryExpr([s](double w) { return fp8_e4m3_round(w / s) * s; });
    }
  });
  return q;
}

}  // namespace dsv4::ref
