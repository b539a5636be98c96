// Attention-layer weights: shape checks against the configuration (capture-format.md's weights
// list, docs/capture-format.md "Weights") and deterministic random weights with the checkpoint's numerics.
#include "reference/weights.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "reference/numerics/storage.h"
#include "reference/parallel.h"
#include "reference/primitives/linear.h"
#include "reference/random.h"

namespace dsv4::ref {

namespace {

// Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "[" + std::to_string(..).
std::string shape_text(Index rows, Index cols) {
  std::string s = "[";
  s += std::to_string(rows);
  s += ", ";
  s += std::to_string(cols);
  return s += "]";
}
std::string shape_text(Index n) {
  std::string s = "[";
  s += std::to_string(n);
  return s += "]";
}

// Shape checks of one layer; every message names the tensor (its capture dataset name), the
// expected shape with the formula it comes from, and the actual shape.
class ShapeChecker {
 public:
  explicit ShapeChecker(int ratio) : prefix_("AttentionWeights (compress_ratio " + std::to_string(ratio) + "): ") {}

  void matrix(const std::string& name, const Mat& m, Index rows, Index cols, const std::string& formula) const {
    if (m.rows() != rows || m.cols() != cols)
      fail(name + " has shape " + shape_text(m.rows(), m.cols()) + ", expected " + formula + " = " +
           shape_text(rows, cols));
  }
  void vector(const std::string& name, const Vec& v, Index n, const std::string& formula) const {
    if (v.size() != n)
      fail(name + " has shape " + shape_text(v.size()) + ", expected " + formula + " = " + shape_text(n));
  }
  // A tensor this layer type does not have must be empty.
  void absent(const std::string& name, Index size, const std::string& why) const {
    if (size != 0) fail(name + " has " + std::to_string(size) + " values, expected none (" + why + ")");
  }
  void value(const std::string& name, int actual, int expected, const std::string& formula) const {
    if (actual != expected)
      fail(name + " = " + std::to_string(actual) + ", expected " + formula + " = " + std::to_string(expected));
  }
  [[noreturn]] void fail(const std::string& what) const { throw std::invalid_argument(prefix_ + what); }

 private:
  std::string prefix_;
};

// d_name: the config field d comes from (head_dim or index_head_dim).
void check_compressor(const ShapeChecker& c, const std::string& prefix, const CompressorWeights& w, int ratio, int d,
                      const std::string& d_name, const ModelConfig& cfg) {
  c.value(prefix + "ratio", w.ratio, ratio, "the layer's compress ratio");
  c.value(prefix + "head_dim", w.head_dim, d, d_name);
  const int coff = ratio == 4 ? 2 : 1;
  const std::string rows = (coff == 2 ? "2*" : "") + d_name;
  c.matrix(prefix + "wkv", w.wkv, coff * d, cfg.dim, "[" + rows + ", dim]");
  c.matrix(prefix + "wgate", w.wgate, coff * d, cfg.dim, "[" + rows + ", dim]");
  c.matrix(prefix + "ape", w.ape, ratio, coff * d, "[ratio, " + rows + "]");
  c.vector(prefix + "norm", w.norm, d, "[" + d_name + "]");
}

void check_no_compressor(const ShapeChecker& c, const std::string& prefix, const CompressorWeights& w,
                         const std::string& why) {
  c.absent(prefix + "wkv", w.wkv.size(), why);
  c.absent(prefix + "wgate", w.wgate.size(), why);
  c.absent(prefix + "ape", w.ape.size(), why);
  c.absent(prefix + "norm", w.norm.size(), why);
}

}  // namespace

void AttentionWeights::validate(const ModelConfig& cfg) const {
  const ShapeChecker c(compress_ratio);
  if (compress_ratio != 0 && compress_ratio != 4 && compress_ratio != 128) c.fail("compress_ratio must be 0, 4 or 128");
  const int H = cfg.n_heads, d = cfg.head_dim, G = cfg.o_groups;
  if (G <= 0 || (static_cast<int64_t>(H) * d) % G != 0)
    c.fail("config '" + cfg.name + "': n_heads * head_dim = " + std::to_string(static_cast<int64_t>(H) * d) +
           " is not a multiple of o_groups = " + std::to_string(G));

  c.matrix("wq_a", wq_a, cfg.q_lora_rank, cfg.dim, "[q_lora_rank, dim]");
  c.vector("q_norm", q_norm, cfg.q_lora_rank, "[q_lora_rank]");
  c.matrix("wq_b", wq_b, static_cast<Index>(H) * d, cfg.q_lora_rank, "[n_heads*head_dim, q_lora_rank]");
  c.matrix("wkv", wkv, d, cfg.dim, "[head_dim, dim]");
  c.vector("kv_norm", kv_norm, d, "[head_dim]");
  c.vector("attn_sink", attn_sink, H, "[n_heads]");
  c.matrix("wo_a", wo_a, static_cast<Index>(G) * cfg.o_lora_rank, static_cast<Index>(H) * d / G,
           "[o_groups*o_lora_rank, n_heads*head_dim/o_groups]");
  c.matrix("wo_b", wo_b, cfg.dim, static_cast<Index>(G) * cfg.o_lora_rank, "[dim, o_groups*o_lora_rank]");

  if (compress_ratio != 0)
    check_compressor(c, "compressor/", compressor, compress_ratio, d, "head_dim", cfg);
  else
    check_no_compressor(c, "compressor/", compressor, "a compress_ratio 0 layer has no compressor");

  if (compress_ratio == 4) {
    c.matrix("indexer/wq_b", indexer.wq_b, static_cast<Index>(cfg.index_n_heads) * cfg.index_head_dim, cfg.q_lora_rank,
             "[index_n_heads*index_head_dim, q_lora_rank]");
    c.matrix("indexer/weights_proj", indexer.weights_proj, cfg.index_n_heads, cfg.dim, "[index_n_heads, dim]");
    check_compressor(c, "indexer/compressor/", indexer.compressor, 4, cfg.index_head_dim, "index_head_dim", cfg);
  } else {
    const std::string why = "only compress_ratio 4 layers have an indexer";
    c.absent("indexer/wq_b", indexer.wq_b.size(), why);
    c.absent("indexer/weights_proj", indexer.weights_proj.size(), why);
    check_no_compressor(c, "indexer/compressor/", indexer.compressor, why);
  }
}

namespace {

// Fills tensors with mean + stddev * N(0, 1). Tensor number k (in the fixed order of random())
// draws from its own streams, one per block of 64 rows seeded from (seed, k, block), values in
// row-major order: the result is the same for any thread count.
class WeightDraws {
 public:
  explicit WeightDraws(uint64_t seed) : seed_(seed) {}

  Mat matrix(Index rows, Index cols, double mean, double stddev) {
    constexpr Index kRowsPerStream = 64;
    const uint64_t tensor = next_tensor_++;
    Mat m(rows, cols);
    parallel_for((rows + kRowsPerStream - 1) / kRowsPerStream, [&](int64_t block) {
      NormalStream normal(splitmix64(splitmix64(splitmix64(seed_) ^ tensor) ^ static_cast<uint64_t>(block)));
      const Index end = std::min(rows, (block + 1) * kRowsPerStream);
      for (Index r = block * kRowsPerStream; r < end; ++r)
        for (Index k = 0; k < cols; ++k) m(r, k) = mean + stddev * normal();
    });
    return m;
  }
  Vec vector(Index n, double mean, double stddev) { return matrix(1, n, mean, stddev).row(0).transpose(); }

 private:
  uint64_t seed_;
  uint64_t next_tensor_ = 0;
};

Mat rounded(Storage s, Mat m) {
  round_in_place(s, m);
  return m;
}
Vec rounded(Storage s, Vec v) {
  round_in_place(s, v);
  return v;
}

// Fan-in scaling keeps x W^T at O(1) for O(1) inputs.
double fan_in_scale(Index fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); }

// An FP8 checkpoint weight [rows, cols]: e4m3 values with a power-of-two 128x128 block scale.
Mat fp8_weight(WeightDraws& draw, Index rows, Index cols) {
  return fp8_weight_fake_quant(draw.matrix(rows, cols, 0, fan_in_scale(cols)));
}

// A bf16 checkpoint weight [rows, cols].
Mat bf16_weight(WeightDraws& draw, Index rows, Index cols) {
  return rounded(Storage::bf16, draw.matrix(rows, cols, 0, fan_in_scale(cols)));
}

// An RMSNorm weight: bf16 in the checkpoint, around 1.
Vec norm_weight(WeightDraws& draw, Index n) { return rounded(Storage::bf16, draw.vector(n, 1, 0.1)); }

// A compressor (docs/math.md "compressor/entries"): wkv and wgate bf16 in the checkpoint (upcast to fp32 on load),
// ape fp32 and small, norm bf16.
CompressorWeights random_compressor(WeightDraws& draw, int ratio, int d, int dim) {
  CompressorWeights w;
  w.ratio = ratio;
  w.head_dim = d;
  const int rows = w.coff() * d;
  w.wkv = bf16_weight(draw, rows, dim);
  w.wgate = bf16_weight(draw, rows, dim);
  w.ape = rounded(Storage::fp32, draw.matrix(ratio, rows, 0, 0.1));
  w.norm = norm_weight(draw, d);
  return w;
}

}  // namespace

AttentionWeights AttentionWeights::random(const ModelConfig& cfg, int compress_ratio, uint64_t seed) {
  cfg.validate();
  if (compress_ratio != 0 && compress_ratio != 4 && compress_ratio != 128)
    throw std::invalid_argument("AttentionWeights::random: compress_ratio = " + std::to_string(compress_ratio) +
                                ", expected 0, 4 or 128");
  const Index H = cfg.n_heads, d = cfg.head_dim, G = cfg.o_groups;
  WeightDraws draw(seed);
  AttentionWeights w;
  w.compress_ratio = compress_ratio;
  w.wq_a = fp8_weight(draw, cfg.q_lora_rank, cfg.dim);
  w.q_norm = norm_weight(draw, cfg.q_lora_rank);
  w.wq_b = fp8_weight(draw, H * d, cfg.q_lora_rank);
  w.wkv = fp8_weight(draw, d, cfg.dim);
  w.kv_norm = norm_weight(draw, d);
  w.attn_sink = rounded(Storage::fp32, draw.vector(H, 0, 1));
  // wo_a is FP8 in the checkpoint and dequantized to bf16 by convert.py: both grids apply.
  w.wo_a = rounded(Storage::bf16, fp8_weight(draw, G * cfg.o_lora_rank, H * d / G));
  w.wo_b = fp8_weight(draw, cfg.dim, G * cfg.o_lora_rank);
  if (compress_ratio != 0) w.compressor = random_compressor(draw, compress_ratio, cfg.head_dim, cfg.dim);
  if (compress_ratio == 4) {
    w.indexer.wq_b = fp8_weight(draw, static_cast<Index>(cfg.index_n_heads) * cfg.index_head_dim, cfg.q_lora_rank);
    w.indexer.weights_proj = bf16_weight(draw, cfg.index_n_heads, cfg.dim);
    w.indexer.compressor = random_compressor(draw, 4, cfg.index_head_dim, cfg.dim);
  }
  w.validate(cfg);
  return w;
}

}  // namespace dsv4::ref
