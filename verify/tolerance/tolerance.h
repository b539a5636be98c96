#pragma once
// One row of a tolerance table: the gates a stage's comparison must pass. Every number comes with
// the reason it has that value (data/tolerances/*.json, derived in docs/tolerances.md).
#include <optional>
#include <string>

namespace dsv4::verify {

// The error bound of a value: atol + atol_rms * rms + rtol * |value|, rms over the finite values
// of the value's row (every axis but the last).
struct ErrorBound {
  double atol = 0.0;
  double atol_rms = 0.0;
  double rtol = 0.0;
  std::string reason;  // why these numbers
};

// Dense stages. An element (reference r, tested t, both finite) passes iff
//   |t - r| <= atol_eff + rtol * |r|,   atol_eff = atol + atol_rms * rms(reference over r's row),
// the rule of torch.testing.assert_close with the reference as `expected`; a row is every axis
// but the last (one head of [b,s,H,d]), its rms over the finite reference values compared.
// atol_rms states an absolute tolerance in units of the row's own scale, which is how the
// arithmetic bounds errors near zero (an error made before a step that mixes elements is bounded
// by the size of the mixed vector, a part of the row, not by the element), and a row of small
// values keeps a small tolerance however large the rest of the tensor is.
// The stage passes iff the non-finite positions match (and hold only values the stage can hold),
// every element passes, and cos_diff and nmse, over the whole tensor, every row and every token,
// are within max_cos_diff and max_nmse where those are set. With bitwise set, the stage passes
// iff every finite value is identical bit for bit (atol/rtol are not used) and the non-finite
// positions match.
// pre_rounding: for a stage whose values are rounded to a grid (bf16, FP8, FP4), the error bound
// of the reference's value before that final rounding, which compare_rounded uses to judge each
// differing element (verify/compare/rounded.h); pre_rounding_tail: the bound of the bf16 dims
// after the block-quantized ones of a row (DeepSeek's rope dims of kv), where it differs.
// Index-set stages (indexer/topk, topk_idxs) use atol and rtol only, as the window around the
// k-th reference score inside which a swapped index counts as a tie (verify/compare/index_set.h).
struct Tolerance {
  double atol = 0.0;
  double atol_rms = 0.0;
  double rtol = 0.0;
  std::optional<double> max_cos_diff;
  std::optional<double> max_nmse;
  bool bitwise = false;
  std::optional<ErrorBound> pre_rounding;
  std::optional<ErrorBound> pre_rounding_tail;
  std::string reason;  // why these numbers (one sentence; the derivation is in docs/tolerances.md)
};

// The tie window of an index-set comparison: a score s is at the threshold thr iff
// |s - thr| <= atol + rtol * |thr|.
struct ScoreTolerance {
  double atol = 0.0;
  double rtol = 0.0;
};

inline ScoreTolerance tie_window(const Tolerance& t) { return {t.atol, t.rtol}; }

}  // namespace dsv4::verify
