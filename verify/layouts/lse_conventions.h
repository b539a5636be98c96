#pragma once
// How engines report the log-sum-exp of a row of attention logits s_j (docs/engine-layouts.md):
//   base     e (ln sum_j e^s_j) or 2 (log2 sum_j e^s_j, i.e. the natural value / ln 2);
//   sink     whether e^sink_h is inside the sum;
//   empty    what a row with no valid key reports when the sink is not inside: +inf (FlashMLA)
//            or -inf (vLLM's reference; ln of an empty sum). With the sink inside, such a row
//            reports the sink itself.
#include <string>
#include <vector>

#include "reference/tensor.h"

namespace dsv4::layouts {

struct LseConvention {
  std::string name;
  bool base2 = false;
  bool sink_included = false;
  double empty_row = 0;  // +inf or -inf

  static LseConvention flashmla();              // base e, sink excluded, empty +inf
  static LseConvention vllm_reference();        // base e, sink excluded, empty -inf
  static LseConvention flashinfer_reference();  // base 2, sink included
  static std::vector<LseConvention> all();
  static LseConvention by_name(const std::string& name);  // throws listing the known names
};

// One lse from one convention to another, given the head's sink (-inf: no sink). A row is empty
// when its lse is the source's empty value (sink excluded) or equals the sink (sink included and
// no other term, up to a relative 1e-12 of the sink's rounding). Converting "sink included" to "excluded" subtracts
// e^sink in log space and loses the relative precision of that difference when the sink dominates.
double convert_lse(double lse, double sink, const LseConvention& from, const LseConvention& to);
// [rows, H] lse with sink [H] per column.
ref::Mat convert_lse(const ref::Mat& lse, const ref::Vec& sink, const LseConvention& from, const LseConvention& to);

}  // namespace dsv4::layouts
