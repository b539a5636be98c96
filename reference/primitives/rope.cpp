// RoPE table and rotation (docs/math.md "RoPE"). DeepSeek builds the table with fp32 torch ops;
// here each op is computed in double and rounded to the table's storage, which is the correctly
// rounded fp32 result (CUDA's powf/cosf/sinf may differ from it by an ulp; that is not knowable).
#include "reference/primitives/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsv4::ref {

namespace {

// YaRN correction dimension (model.py find_correction_dim, Python doubles):
// corr(r) = rope_dim * ln(L / (r * 2 pi)) / (2 ln base)
double correction_dim(double rotations, int rope_dim, double base, int original_seq_len) {
  return rope_dim * std::log(original_seq_len / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

}  // namespace

RopeTable RopeTable::make(int rope_dim, double base, int original_seq_len, double factor, double beta_fast,
                          double beta_slow, Storage storage) {
  if (rope_dim <= 0 || rope_dim % 2 != 0)
    throw std::invalid_argument("RopeTable::make: rope_dim = " + std::to_string(rope_dim) +
                                ", expected a positive even number");
  if (!(base > 1)) throw std::invalid_argument("RopeTable::make: base = " + std::to_string(base) + ", expected > 1");
  if (original_seq_len > 0 && !(factor > 0 && beta_fast > 0 && beta_slow > 0))
    throw std::invalid_argument("RopeTable::make: YaRN needs factor, beta_fast, beta_slow > 0, got " +
                                std::to_string(factor) + ", " + std::to_string(beta_fast) + ", " +
                                std::to_string(beta_slow));
  const auto r = [storage](double v) { return round_to(storage, v); };
  const int half = rope_dim / 2;

  RopeTable table;
  table.rope_dim = rope_dim;
  table.storage = storage;
  table.freqs.resize(half);
  // freqs_i = 1 / base^(2i / rope_dim): exponent, power and reciprocal are each an fp32 tensor.
  for (int i = 0; i < half; ++i) {
    const double exponent = r(static_cast<double>(2 * i) / rope_dim);
    table.freqs(i) = r(1.0 / r(std::pow(r(base), exponent)));
  }
  if (original_seq_len <= 0) return table;

  // YaRN (model.py find_correction_range / linear_ramp_factor):
  //   low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), rope_dim - 1)
  //   ramp_i = clamp((i - low) / (high - low), 0, 1), with high += 0.001 when high == low
  //   smooth = 1 - ramp
  //   freqs = freqs / factor * (1 - smooth) + freqs * smooth
  // The code writes the blend through `smooth`, and in fp32 (1 - smooth) is not always ramp, so
  // the ops below are the code's, one rounding each.
  const double low = std::max(std::floor(correction_dim(beta_fast, rope_dim, base, original_seq_len)), 0.0);
  double high = std::min(std::ceil(correction_dim(beta_slow, rope_dim, base, original_seq_len)),
                         static_cast<double>(rope_dim - 1));
  if (high == low) high += 0.001;
  const double span = r(high - low);  // a Python scalar meeting an fp32 tensor: used as fp32
  for (int i = 0; i < half; ++i) {
    const double ramp = std::clamp(r(r(i - low) / span), 0.0, 1.0);
    const double smooth = r(1 - ramp);
    const double f = table.freqs(i);
    table.freqs(i) = r(r(r(f / factor) * r(1 - smooth)) + r(f * smooth));
  }
  return table;
}

RopeTable RopeTable::for_layer(const ModelConfig& cfg, int compress_ratio, const PrecisionPolicy& p) {
  if (compress_ratio != 0)
    return make(cfg.rope_head_dim, cfg.compress_rope_theta, cfg.original_seq_len, cfg.rope_factor, cfg.beta_fast,
                cfg.beta_slow, p.fp32_tensors);
  return make(cfg.rope_head_dim, cfg.rope_theta, 0, 0, 0, 0, p.fp32_tensors);
}

namespace {

// angle = t * freq_i: torch.outer(arange(seqlen), freqs) in fp32 (t converted to fp32 first).
double angle_at(const RopeTable& table, int64_t t, int i) {
  if (i < 0 || i >= table.freqs.size())
    throw std::out_of_range("RopeTable: pair " + std::to_string(i) + " outside [0, " +
                            std::to_string(table.freqs.size()) + ")");
  if (t < 0) throw std::out_of_range("RopeTable: position " + std::to_string(t) + ", expected >= 0");
  return round_to(table.storage, round_to(table.storage, static_cast<double>(t)) * table.freqs(i));
}

}  // namespace

// torch.polar(1, angle): cos and sin of the stored angle, each an fp32 value.
double RopeTable::cos_at(int64_t t, int i) const { return round_to(storage, std::cos(angle_at(*this, t, i))); }
double RopeTable::sin_at(int64_t t, int i) const { return round_to(storage, std::sin(angle_at(*this, t, i))); }

// row [n_heads * head_dim]
// For each head, pair i of the last rope_dim dims is the complex number x[2i] + j x[2i+1], and
//   (re, im) = (a c - b s, a s + b c),  (c, s) = (cos, sin) of t * freq_i, s negated when inverse,
// computed in double, rounded to fp32_tensors (torch's complex64 product), then written back into
// the activation tensor (rounded to activations).
void apply_rope(RowRef row, int n_heads, int head_dim, int64_t position, const RopeTable& table, bool inverse,
                const PrecisionPolicy& p) {
  const int rope_dim = table.rope_dim;
  if (rope_dim <= 0 || head_dim < rope_dim)
    throw std::invalid_argument("apply_rope: head_dim = " + std::to_string(head_dim) +
                                ", expected >= table.rope_dim = " + std::to_string(rope_dim) + " > 0");
  if (n_heads <= 0 || row.size() != static_cast<Index>(n_heads) * head_dim)
    throw std::invalid_argument(
        "apply_rope: row has " + std::to_string(row.size()) +
        " values, expected n_heads * head_dim = " + std::to_string(static_cast<Index>(n_heads) * head_dim));
  const int half = rope_dim / 2;
  // The position and the pairing are DeepSeek's unless p.variant simulates a bug class. A negative
  // position (a shift of -1 at t = 0) rotates backwards: fp32(-t * f) = -fp32(t * f), so its
  // cos and sin are those of |t| with the sine negated.
  const RopePairs pairs = p.variant.rope_pairs;
  const int64_t at = position + p.variant.rope_position_shift;
  const double backwards = at < 0 ? -1.0 : 1.0;
  std::vector<double> c(half), s(half);
  for (int i = 0; i < half; ++i) {
    c[i] = table.cos_at(at < 0 ? -at : at, i);
    const double sine = backwards * table.sin_at(at < 0 ? -at : at, i);
    s[i] = inverse ? -sine : sine;
  }
  const auto store = [&p](double v) { return round_to(p.activations, round_to(p.fp32_tensors, v)); };
  // Pair i is (first + 2i, first + 2i + 1), or (first + i, first + half + i) for halves.
  const Index first_in_head = pairs == RopePairs::first_interleaved ? 0 : head_dim - rope_dim;
  const Index step = pairs == RopePairs::last_halves ? 1 : 2;
  const Index partner = pairs == RopePairs::last_halves ? half : 1;
  for (int h = 0; h < n_heads; ++h) {
    const Index first = static_cast<Index>(h) * head_dim + first_in_head;
    for (int i = 0; i < half; ++i) {
      const Index re = first + step * i, im = re + partner;
      const double a = row(re);
      const double b = row(im);
      row(re) = store(a * c[i] - b * s[i]);
      row(im) = store(a * s[i] + b * c[i]);
    }
  }
}

}  // namespace dsv4::ref
