#pragma once
// The outcome of one compared stage. PASS/FAIL/VACUOUS come from a comparator (VACUOUS: nothing
// was compared, e.g. a call that completed no compressor entry: a zero-element comparison proves
// nothing and is never counted as a pass); MISSING (the capture has no such dataset) and SKIPPED
// (not replayed: the layer type has no such stage, or the run asked for fewer stages) come from
// the replay.
#include <string>

namespace dsv4::verify {

enum class Status { pass, fail, vacuous, missing, skipped };

// "PASS", "FAIL", "VACUOUS", "MISSING", "SKIPPED": the words of every report.
inline std::string to_string(Status s) {
  switch (s) {
    case Status::pass: return "PASS";
    case Status::fail: return "FAIL";
    case Status::vacuous: return "VACUOUS";
    case Status::missing: return "MISSING";
    case Status::skipped: return "SKIPPED";
  }
  return "UNKNOWN";
}

}  // namespace dsv4::verify
