#include "verify/report/record.h"

namespace dsv4::verify {

std::optional<StageId> Report::first_failure() const {
  for (const Record& r : records) {
    if (r.status == Status::fail) return r.id();
  }
  return std::nullopt;
}

StatusCounts Report::counts() const {
  StatusCounts c;
  for (const Record& r : records) {
    switch (r.status) {
      case Status::pass: ++c.passed; break;
      case Status::fail: ++c.failed; break;
      case Status::missing: ++c.missing; break;
      case Status::skipped: ++c.skipped; break;
    }
  }
  return c;
}

}  // namespace dsv4::verify
