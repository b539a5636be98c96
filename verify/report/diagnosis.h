#pragma once
// What the replay's diagnosis found for a failing stage (verify/replay/diagnose.h): the captured
// values compared bit for bit with the oracle's and with the oracle's under each numerics variant
// that applies to the stage (reference/mutation.h), from the same stage-local inputs.
#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::verify {

// One variant tried.
struct VariantTrial {
  std::string mutation;    // "indexer/q:ties-toward-zero"
  std::string describe;    // "FP4 ties rounded toward zero instead of to even"
  int64_t explained = 0;   // units the oracle gets wrong (bitwise) and the variant gets right
  int64_t introduced = 0;  // units the oracle gets right and the variant gets wrong
  int64_t differing = 0;   // units where the variant differs from the capture

  bool reproduces() const { return differing == 0; }
};

struct Diagnosis {
  int call = 0;                      // the call replayed (the stage's first failing call)
  std::string unit;                  // "values" (dense stages) or "rows" (index sets: a row differs as a set)
  int64_t compared = 0;              // units compared
  int64_t oracle_differing = 0;      // units where the oracle itself differs from the capture
  std::vector<VariantTrial> trials;  // best first: fewest differing, then most explained

  // One line: "matches indexer/q:ties-toward-zero (FP4 ties rounded toward zero instead of to even)
  // bitwise: 189 of 189 differing values explained", the closest variant with its margin, or why
  // no variant applies.
  std::string summary() const;
};

}  // namespace dsv4::verify
