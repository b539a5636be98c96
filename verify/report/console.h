#pragma once
// The console report: one aligned line per record (status, stage, shape, dtype, then the metrics
// of its comparator), the first failure named at the top and again at the end, and the closing
// summary line "summary: N passed, M failed, K skipped".
#include <ostream>

#include "verify/report/record.h"

namespace dsv4::verify {

void write_console(std::ostream& out, const Report& report);

}  // namespace dsv4::verify
