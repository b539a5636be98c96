#pragma once
// The console report. By default one line per stage: its verdict, how its records came out
// (passed / failed / vacuous, and missing), its worst record with how close it came to failing
// (measured / allowed of its closest gate) and that record's key metrics. Then the first failure,
// what failed in it and the command that replays exactly that record; the stages vacuous in
// every call; and the closing summary line "summary: N passed, M failed, K skipped".
// verbose: every record on its own aligned line (status, stage, shape, dtype, the metrics of its
// comparator, the worst row and token, the rounding census) before the stage lines.
#include <ostream>
#include <string>

#include "verify/report/record.h"

namespace dsv4::verify {

struct ConsoleOptions {
  bool verbose = false;
};

void write_console(std::ostream& out, const Report& report, const ConsoleOptions& options = {});

// One record as the verbose report prints it: its line, and for a FAIL the indented detail line
// (the Python package's str(record)).
std::string record_lines(const Record& r);

}  // namespace dsv4::verify
