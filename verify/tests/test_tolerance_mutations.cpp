// Every row of every shipped tolerance table (official, lowp, exact) is backed by mutations that
// must fail it: on stage-shaped data at the tiny dims, a correct producer (its values before the
// final rounding moved within the row's bound in a few elements) passes the row, and each bug
// class that applies to the stage fails it: values scaled by 1.1, every value one bf16 ulp high,
// FP4 ties toward zero, FP8 truncation, no quantization, UE8M0 floor, a wrong amax floor, one row
// of small values zeroed, one head zeroed, NaN on both sides, and an empty tensor (VACUOUS, not
// PASS). Rounded stages are judged as the replay judges them with their pre-rounding values
// (compare_rounded on the stage's official grid, verify/compare/stage_rounding.h); the others
// (compressor states, exact) with compare_dense.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "reference/call_geometry.h"
#include "reference/config.h"
#include "reference/precision.h"
#include "reference/stage_registry.h"
#include "verify/compare/index_set.h"
#include "verify/compare/rounded.h"
#include "verify/compare/stage_rounding.h"
#include "verify/tests/buggy_quantizers.h"
#include "verify/tolerance/tolerance_table.h"

using namespace dsv4;
using namespace dsv4::verify;
using namespace dsv4::verify::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Lcg {
  uint64_t state;
  double uniform() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  }
  double normal() {
    const double u = uniform() + 1e-300, v = uniform();
    return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

enum class Mutation {
  scaled_1_1,
  bf16_ulp_high,
  fp4_ties_toward_zero,
  fp8_truncation,
  skipped_quantization,
  ue8m0_floor,
  wrong_amax_floor,
  one_row_corrupted,
  one_head_corrupted,
  nan_pairs,
};

const char* name(Mutation m) {
  switch (m) {
    case Mutation::scaled_1_1: return "values scaled by 1.1";
    case Mutation::bf16_ulp_high: return "every value one bf16 ulp high";
    case Mutation::fp4_ties_toward_zero: return "FP4 ties toward zero";
    case Mutation::fp8_truncation: return "FP8 truncation";
    case Mutation::skipped_quantization: return "quantization skipped";
    case Mutation::ue8m0_floor: return "UE8M0 floor instead of ceil";
    case Mutation::wrong_amax_floor: return "wrong amax floor";
    case Mutation::one_row_corrupted: return "one row of small values zeroed";
    case Mutation::one_head_corrupted: return "one head zeroed";
    case Mutation::nan_pairs: return "NaN on both sides";
  }
  return "";
}

// A dense stage's data: the reference's values before the final rounding, a correct producer's,
// and how the stage rounds last (official's grid; nullopt: stored as fp32, compared dense).
struct StageCase {
  std::string stage;
  std::vector<int64_t> shape;
  std::optional<RoundingFormat> format;
  NonFiniteRule rule;
  std::vector<double> pre, moved;
  int64_t row_length = 0, heads = 1;
  int64_t small_token = -1;  // a token (all its heads) of values 2^-10 of the others
  int64_t small_head = -1;   // four-axis stages: one head (row) of such values
  bool fp4() const { return format && format->block && format->block->element == ref::Element::e2m1; }
  bool fp8() const { return format && format->block && format->block->element == ref::Element::e4m3; }
};

const ref::ModelConfig& config() {
  static const ref::ModelConfig c = ref::ModelConfig::tiny();
  return c;
}

// The bound of each pre-rounding value as compare_rounded evaluates the row's (or, for a dense
// stage, the elementwise allowance), over rows of the last axis.
std::vector<double> bounds(const StageCase& c, const Tolerance& row) {
  std::vector<double> e(c.pre.size());
  const int64_t tail = c.format ? c.format->quantized_dims(c.row_length) : c.row_length;
  for (size_t start = 0; start < c.pre.size(); start += static_cast<size_t>(c.row_length)) {
    double sum2 = 0;
    int64_t n = 0;
    for (int64_t k = 0; k < c.row_length; ++k) {
      const double v = c.pre[start + k];
      if (std::isfinite(v)) sum2 += v * v, ++n;
    }
    const double rms = n ? std::sqrt(sum2 / n) : 0;
    for (int64_t k = 0; k < c.row_length; ++k) {
      ErrorBound b{row.atol, row.atol_rms, row.rtol, ""};
      if (c.format) b = k >= tail && row.pre_rounding_tail ? *row.pre_rounding_tail : *row.pre_rounding;
      e[start + k] = b.atol + b.atol_rms * rms + b.rtol * std::fabs(c.pre[start + k]);
    }
  }
  return e;
}

// The final rounding of values before it: the stage's grid (DeepSeek's quantizer, or a buggy one),
// or fp32.
std::vector<double> finish(const StageCase& c, const std::vector<double>& x,
                           ElementRounding mode = ElementRounding::nearest_even,
                           ScaleRounding scale = ScaleRounding::ceil, float amax_floor = -1) {
  if (!c.format) {
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i]);
    return out;
  }
  const int64_t dims = c.format->quantized_dims(c.row_length);
  return quantize_rows(c.fp4(), x, c.row_length, dims, c.format->block ? c.format->block->block : 1, mode, scale,
                       amax_floor);
}

StageCase make_case(const std::string& stage, const Tolerance& row, bool with_grid) {
  StageCase c;
  c.stage = stage;
  const ref::StageDef* s = ref::find_stage(stage);
  const ref::CallGeometry g{&config(), 4, 2, 64, 0};
  c.shape = s->shape(g);
  c.rule = NonFiniteRule::of(s->values);
  if (with_grid) c.format = final_rounding(stage, ref::PrecisionPolicy::official(), config());
  c.row_length = c.shape.back();
  c.heads = c.shape.size() == 4 ? c.shape[2] : 1;
  const int64_t n = element_count(c.shape, "test"), rows = n / c.row_length, tokens = rows / c.heads;
  c.small_token = tokens > 45 ? 40 : tokens - 3;
  if (c.heads > 1) c.small_head = 1;
  const int64_t quantized = c.format ? c.format->quantized_dims(c.row_length) : 0;
  const bool tiny_row = quantized > 0;  // block stages: the last row has amax < 1e-4 (the amax floors)

  uint64_t seed = 14695981039346656037ULL;  // FNV-1a of the stage name: the same data on every host
  for (char ch : stage) seed = (seed ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
  Lcg lcg{seed};
  c.pre.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    double scale = std::ldexp(1.0, static_cast<int>((r * 37) % 7) - 3);
    if (r / c.heads == c.small_token || r == c.small_head) scale *= 0x1p-10;
    if (tiny_row && r == rows - 1) scale = 1e-6;
    for (int64_t k = 0; k < c.row_length; ++k) {
      const double v = scale * lcg.normal();
      double& p = c.pre[r * c.row_length + k];
      p = k < quantized ? bf16(v) : static_cast<float>(v);  // a bf16 tensor before FP8/FP4, fp32 before bf16
      if (stage == "indexer/scores" && k >= (r % 64 + 1) / 4) p = -kInf;  // not yet visible
      if (stage.ends_with("state_score") && r % 8 >= 6) p = -kInf;        // fresh slots
    }
    if (c.fp4()) {
      // Exact e2m1 ties (0.25, 0.75, ... times the block scale) in a fifth of each block.
      const double ties[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
      for (int64_t b = 0; b < quantized; b += 32) {
        double* block = &c.pre[r * c.row_length + b];
        double amax = 0;
        for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(block[k]));
        const double sc = ref::block_scale(*c.format->block, amax, 0);
        for (int k = 0; k < 32; ++k) {
          const double tie = ties[static_cast<int>(lcg.uniform() * 7)] * sc;
          if (lcg.uniform() < 0.2 && tie < amax) block[k] = std::copysign(tie, block[k]);
        }
      }
    }
  }
  // A correct producer: 1 element in 256 moved by up to half its bound (then held in bf16 where the
  // producer holds it in bf16): flips are rare (stage-locally the DeepSeek capture differs in at
  // most 5 of 136,192 q values, docs/deepseek-capture.md), and each is within its bound.
  const std::vector<double> e = bounds(c, row);
  c.moved = c.pre;
  for (size_t i = 0; i < c.moved.size(); ++i) {
    if (lcg.uniform() >= 1.0 / 256 || !std::isfinite(c.pre[i])) continue;
    const double v = c.pre[i] + (2 * lcg.uniform() - 1) * e[i] / 2;
    c.moved[i] = static_cast<int64_t>(i) % c.row_length < quantized ? bf16(v) : static_cast<float>(v);
  }
  return c;
}

DenseMetrics judge(const StageCase& c, const Tolerance& row, const std::vector<double>& pre,
                   const std::vector<double>& got, const std::vector<int64_t>& shape) {
  const std::vector<double> ref = finish(c, pre);
  if (c.format) return compare_rounded(ref, got, shape, RoundedReference{pre, *c.format, {}}, row, c.rule);
  return compare_dense(ref, got, shape, row, c.rule);
}

// The mutations a stage's row must fail. Not applied: FP8 with a wrong amax floor (an e4m3 grid is
// floating, so a scale that is a power of two off changes only values in the subnormal range, by
// less than the bound of their row: the bug is invisible in the values); one bf16 ulp high on lowp's
// compressor states (the envelope admits the bf16 policy's bf16 states, 2 flips each).
std::vector<Mutation> mutations_of(const StageCase& c, const std::string& precision) {
  std::vector<Mutation> m{Mutation::scaled_1_1, Mutation::one_row_corrupted, Mutation::nan_pairs};
  if (!(precision == "lowp" && c.stage.find("state_") != std::string::npos)) m.push_back(Mutation::bf16_ulp_high);
  if (c.small_head >= 0) m.push_back(Mutation::one_head_corrupted);
  if (c.fp8()) m.push_back(Mutation::fp8_truncation);
  if (c.fp4()) {
    m.push_back(Mutation::fp4_ties_toward_zero);
    m.push_back(Mutation::wrong_amax_floor);
  }
  if (c.fp8() || c.fp4()) {
    m.push_back(Mutation::skipped_quantization);
    m.push_back(Mutation::ue8m0_floor);
  }
  return m;
}

// The tested values of a mutation (and the reference's pre-rounding values, for NaN pairs).
std::vector<double> mutate(const StageCase& c, Mutation m, std::vector<double>& pre) {
  std::vector<double> got = finish(c, c.moved);
  auto zero_rows = [&](int64_t first, int64_t count) {
    for (int64_t i = first * c.row_length; i < (first + count) * c.row_length; ++i)
      if (std::isfinite(got[i])) got[i] = 0;
  };
  switch (m) {
    case Mutation::scaled_1_1: {
      std::vector<double> scaled = c.moved;
      const int64_t dims = c.format ? c.format->quantized_dims(c.row_length) : 0;
      for (size_t i = 0; i < scaled.size(); ++i) {
        scaled[i] *= 1.1;
        if (static_cast<int64_t>(i) % c.row_length < dims) scaled[i] = bf16(scaled[i]);
      }
      return finish(c, scaled);
    }
    case Mutation::bf16_ulp_high:
      for (double& v : got)
        if (std::isfinite(v)) v = bf16_up(bf16(v));
      return got;
    case Mutation::fp4_ties_toward_zero: return finish(c, c.moved, ElementRounding::ties_toward_zero);
    case Mutation::fp8_truncation: return finish(c, c.moved, ElementRounding::truncate);
    case Mutation::skipped_quantization:
      for (size_t i = 0; i < got.size(); ++i) got[i] = bf16(c.moved[i]);
      return got;
    case Mutation::ue8m0_floor: return finish(c, c.moved, ElementRounding::nearest_even, ScaleRounding::floor);
    case Mutation::wrong_amax_floor:  // FP4 with FP8's floor 1e-4 instead of 6 * 2^-126
      return finish(c, c.moved, ElementRounding::nearest_even, ScaleRounding::ceil, kFp8AmaxFloor);
    case Mutation::one_row_corrupted: zero_rows(c.small_token * c.heads, c.heads); return got;
    case Mutation::one_head_corrupted: zero_rows(c.small_head, 1); return got;
    case Mutation::nan_pairs:
      pre[5] = std::numeric_limits<double>::quiet_NaN();
      got[5] = pre[5];
      return got;
  }
  return got;
}

void check_stage_row(const ToleranceTable& table, const std::string& stage, bool with_grid) {
  const Tolerance& row = table.at(stage);
  const StageCase c = make_case(stage, row, with_grid);
  INFO(table.precision(), " ", stage, " ", c.format ? c.format->name() : "dense");
  if (c.format) REQUIRE(row.pre_rounding.has_value());

  const DenseMetrics clean = judge(c, row, c.pre, finish(c, c.moved), c.shape);
  CHECK(clean.status == Status::pass);
  if (clean.status != Status::pass) {
    MESSAGE("clean fails: ", clean.failed_gates.front(), "; ", clean.worst_ratio_gate, " ratio ", clean.worst_ratio);
    if (clean.rounding && clean.rounding->first_unexplained.found())
      MESSAGE("unexplained: ", clean.rounding->first_unexplained.why);
  }
  CHECK(clean.n > 0);

  for (Mutation m : mutations_of(c, table.precision())) {
    INFO(std::string(name(m)));
    std::vector<double> pre = c.pre;
    const std::vector<double> got = mutate(c, m, pre);
    const DenseMetrics d = judge(c, row, pre, got, c.shape);
    CHECK(d.status == Status::fail);
    if (d.status != Status::fail && d.rounding)
      MESSAGE("census: differ ", d.rounding->differing, " unexplained ", d.rounding->unexplained, " scales ",
              d.rounding->block_scales_differ, "/", d.rounding->block_scales_unexplained, " p ",
              d.rounding->bias_p_value);
  }

  // An empty call: nothing compared, VACUOUS.
  std::vector<int64_t> empty = c.shape;
  empty[1] = 0;
  const std::vector<double> none;
  CHECK(judge(c, row, none, none, empty).status == Status::vacuous);
}

// The index-set rows: a swap at an exact tie passes, one index replaced by one far below the
// threshold fails, a window index changed fails, nothing to compare is VACUOUS.
void check_index_row(const ToleranceTable& table, const std::string& stage) {
  INFO(table.precision(), " ", stage);
  const ScoreTolerance window = tie_window(table.at(stage));
  const int64_t offset = stage == "topk_idxs" ? 16 : 0, rows = 4, n = 32, k = 8;
  Lcg lcg{42};
  std::vector<double> scores(rows * n);
  for (double& s : scores) s = bf16(lcg.normal());
  std::vector<int64_t> ref, tie, far, window_changed;
  for (int64_t r = 0; r < rows; ++r) {
    double* row = &scores[r * n];
    std::vector<int64_t> order(n);
    for (int64_t j = 0; j < n; ++j) order[j] = j;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    row[order[k]] = row[order[k - 1]];  // an exact tie at the threshold, left out of the reference
    std::vector<int64_t> picked(order.begin(), order.begin() + k);
    if (offset) picked.insert(picked.begin(), r);  // a window index of topk_idxs (no score)
    for (int64_t& i : picked)
      if (!offset || &i != &picked.front()) i += offset;
    std::vector<int64_t> swapped = picked, replaced = picked, moved = picked;
    swapped.back() = order[k] + offset;
    replaced.back() = order[n - 1] + offset;
    if (offset) moved.front() = r + 1;
    ref.insert(ref.end(), picked.begin(), picked.end());
    tie.insert(tie.end(), swapped.begin(), swapped.end());
    far.insert(far.end(), replaced.begin(), replaced.end());
    window_changed.insert(window_changed.end(), moved.begin(), moved.end());
  }
  const int64_t cols = static_cast<int64_t>(ref.size()) / rows;
  const ScoreRows s{scores, rows, n};
  CHECK(compare_index_sets({ref, rows, cols}, {tie, rows, cols}, s, window, offset).status == Status::pass);
  CHECK(compare_index_sets({ref, rows, cols}, {far, rows, cols}, s, window, offset).status == Status::fail);
  if (offset) {
    CHECK(compare_index_sets({ref, rows, cols}, {window_changed, rows, cols}, s, window, offset).status ==
          Status::fail);
  }
  const std::vector<int64_t> none;
  CHECK(compare_index_sets({none, rows, 0}, {none, rows, 0}, {}, window, offset).status == Status::vacuous);
}

// The default row, for a dense dataset without a row of its own (no grid known): kv-shaped data
// with a few values moved by a quarter of the row's rtol passes; scaled values, a zeroed small
// row, NaN fail; empty is VACUOUS.
void check_default_row(const ToleranceTable& table) {
  INFO(table.precision(), " default");
  REQUIRE(table.default_row().has_value());
  const Tolerance& row = *table.default_row();
  const std::vector<int64_t> shape{2, 64, 128};
  Lcg lcg{99};
  std::vector<double> ref(2 * 64 * 128), clean, scaled, zeroed, nan_ref, nan_got;
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = bf16(std::ldexp(lcg.normal(), static_cast<int>(i / 128 % 7) - 3));
  for (size_t i = 40 * 128; i < 41 * 128; ++i) ref[i] *= 0x1p-10;
  clean = scaled = zeroed = nan_ref = nan_got = ref;
  for (size_t i = 0; i < ref.size(); i += 17) clean[i] = ref[i] * (1 + row.rtol / 4);
  for (double& v : scaled) v = bf16(v * 1.1);
  for (size_t i = 40 * 128; i < 41 * 128; ++i) zeroed[i] = 0;
  nan_ref[3] = nan_got[3] = std::numeric_limits<double>::quiet_NaN();
  CHECK(compare_dense(ref, clean, shape, row).status == Status::pass);
  CHECK(compare_dense(ref, scaled, shape, row).status == Status::fail);
  CHECK(compare_dense(ref, zeroed, shape, row).status == Status::fail);
  CHECK(compare_dense(nan_ref, nan_got, shape, row).status == Status::fail);
  const std::vector<int64_t> empty{2, 0, 128};
  const std::vector<double> none;
  CHECK(compare_dense(none, none, empty, row).status == Status::vacuous);
}

void check_table(const std::string& precision, bool with_grid) {
  const ToleranceTable table = ToleranceTable::for_precision(precision);
  for (const ref::StageDef& s : ref::stages()) {
    if (!s.is_compared()) continue;
    if (s.is_index())
      check_index_row(table, std::string(s.name));
    else
      check_stage_row(table, std::string(s.name), with_grid);
  }
  check_default_row(table);
}

}  // namespace

TEST_CASE("official.json: every row passes a correct producer and fails every mutation of its stage") {
  check_table("official", true);
}

TEST_CASE("lowp.json: every row passes a correct producer and fails every mutation of its stage") {
  check_table("lowp", true);
}

TEST_CASE("exact.json: every row passes a correct producer and fails every mutation of its stage") {
  check_table("exact", false);
}
