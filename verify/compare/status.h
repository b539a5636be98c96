#pragma once
// The outcome of one compared stage. PASS/FAIL come from a comparator; MISSING (the capture has no
// such dataset) and SKIPPED (not replayed: the layer type has no such stage, or the run asked for
// fewer stages) come from the replay.
#include <string>

namespace dsv4::verify {

enum class Status { pass, fail, missing, skipped };

// "PASS", "FAIL", "MISSING", "SKIPPED": the words of every report.
inline std::string to_string(Status s) {
  switch (s) {
    case Status::pass: return "PASS";
    case Status::fail: return "FAIL";
    case Status::missing: return "MISSING";
    case Status::skipped: return "SKIPPED";
  }
  return "UNKNOWN";
}

}  // namespace dsv4::verify
