#pragma once
// Helpers of the layer-level tests: random attention inputs, running a sequence as a list of calls,
// and bitwise comparison of every StageOutputs field.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/numerics/storage.h"

namespace dsv4::ref::testing {

// Attention inputs as DeepSeek holds them (bf16 values), N(0, 1). -> [n, dim]
inline Mat random_tokens(int dim, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Mat x(n, dim);
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = round_to(Storage::bf16, normal(rng));
  return x;
}

// One call of a sequence: its first position and everything it returned.
struct Call {
  int64_t start = 0;
  StageOutputs out;
};

// Runs x through the layer as calls [bounds[i], bounds[i+1]) (bounds start at 0, end at x.rows()).
inline std::vector<Call> run_calls(const AttentionLayer& layer, const Mat& x, const std::vector<int64_t>& bounds,
                                   KvCache& cache, int seq) {
  std::vector<Call> calls;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const int64_t start = bounds[i];
    calls.push_back({start, layer.forward(x.middleRows(start, bounds[i + 1] - start), start, cache, seq)});
  }
  return calls;
}

// Bitwise equality (so -0 != +0 and a NaN equals only the same NaN).
inline bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

template <typename A, typename B>
bool bitwise_equal(const A& a, const B& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Index r = 0; r < a.rows(); ++r)
    for (Index c = 0; c < a.cols(); ++c)
      if (!same_bits(static_cast<double>(a(r, c)), static_cast<double>(b(r, c)))) return false;
  return true;
}

inline bool same_state(const CompressorState& a, const CompressorState& b) {
  return a.ratio == b.ratio && a.head_dim == b.head_dim && bitwise_equal(a.kv, b.kv) && bitwise_equal(a.score, b.score);
}

// Every field of two calls, bitwise (index lists exactly).
inline void check_same_outputs(const StageOutputs& a, const StageOutputs& b, const std::string& where) {
  INFO(where);
  CHECK(bitwise_equal(a.q_latent, b.q_latent));
  CHECK(bitwise_equal(a.q, b.q));
  CHECK(bitwise_equal(a.kv, b.kv));
  CHECK(bitwise_equal(a.compressor_entries, b.compressor_entries));
  CHECK(same_state(a.compressor_state, b.compressor_state));
  CHECK(bitwise_equal(a.indexer_q, b.indexer_q));
  CHECK(bitwise_equal(a.indexer_weights, b.indexer_weights));
  CHECK(bitwise_equal(a.indexer_compressor_entries, b.indexer_compressor_entries));
  CHECK(same_state(a.indexer_compressor_state, b.indexer_compressor_state));
  CHECK(bitwise_equal(a.indexer_scores, b.indexer_scores));
  CHECK(bitwise_equal(a.indexer_topk, b.indexer_topk));
  CHECK(bitwise_equal(a.topk_idxs, b.topk_idxs));
  CHECK(bitwise_equal(a.attn_core, b.attn_core));
  CHECK(bitwise_equal(a.attn_out_heads, b.attn_out_heads));
  CHECK(bitwise_equal(a.attn_wo_a, b.attn_wo_a));
  CHECK(bitwise_equal(a.out, b.out));
}

}  // namespace dsv4::ref::testing
