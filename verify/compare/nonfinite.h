#pragma once
// Which non-finite values a stage's tensor may hold. A non-finite value passes a comparison only
// when both sides hold the same one at the same position AND the stage can hold it at all.
// DeepSeek's code produces exactly one non-finite value: -inf, in the masked indexer scores and in
// the score slots of a fresh compressor state. NaN and +inf appear in none of its tensors, so a
// NaN is a failure even where both sides hold it (an all-NaN pair proves nothing).
#include <string>

#include "reference/stage_registry.h"

namespace dsv4::verify {

struct NonFiniteRule {
  bool minus_inf = false;  // -inf may appear (at the same positions on both sides)
  bool plus_inf = false;
  bool nan = false;

  // What a stage's values may be (reference/stage_registry.h): finite, or finite or -inf.
  static NonFiniteRule of(ref::StageValues values) {
    return {values == ref::StageValues::finite_or_minus_inf, false, false};
  }
  bool allows(double v) const;   // v is finite, or a non-finite value the rule lists
  std::string describe() const;  // "none", "-inf", "-inf, +inf, nan"
};

}  // namespace dsv4::verify
