#include "verify/report/record.h"

#include <algorithm>

#include "reference/stage_registry.h"

namespace dsv4::verify {

namespace {

void count(StatusCounts& c, Status s) {
  switch (s) {
    case Status::pass: ++c.passed; break;
    case Status::fail: ++c.failed; break;
    case Status::vacuous: ++c.vacuous; break;
    case Status::missing: ++c.missing; break;
    case Status::skipped: ++c.skipped; break;
  }
}

}  // namespace

double worst_ratio(const Record& r) {
  if (r.status == Status::vacuous) return 0.0;
  if (const auto* d = std::get_if<DenseMetrics>(&r.verdict_metrics())) return d->worst_ratio;
  if (const auto* i = std::get_if<IndexSetMetrics>(&r.verdict_metrics())) return i->worst_ratio;
  return 0.0;
}

std::optional<StageId> Report::first_failure() const {
  for (const Record& r : records) {
    if (r.status == Status::fail) return r.id();
  }
  return std::nullopt;
}

StatusCounts Report::counts() const {
  StatusCounts c;
  for (const Record& r : records) count(c, r.status);
  return c;
}

std::vector<StageSummary> Report::stages() const {
  std::vector<StageSummary> out;
  for (const Record& r : records) {
    auto it = std::find_if(out.begin(), out.end(), [&](const StageSummary& s) { return s.stage == r.stage; });
    if (it == out.end()) {
      out.push_back(StageSummary{r.stage, {}, {}, nullptr});
      it = out.end() - 1;
    }
    count(it->counts, r.status);
    if (std::find(it->layers.begin(), it->layers.end(), r.layer) == it->layers.end()) it->layers.push_back(r.layer);
    if (r.status != Status::pass && r.status != Status::fail) continue;
    // A FAIL before any PASS; among equals, the largest measured / allowed (the first on ties).
    const bool worse = !it->worst || (r.status == Status::fail && it->worst->status != Status::fail) ||
                       (r.status == it->worst->status && worst_ratio(r) > worst_ratio(*it->worst));
    if (worse) it->worst = &r;
  }
  for (StageSummary& s : out) std::sort(s.layers.begin(), s.layers.end());
  // The capture format's stage order (stages it does not name keep their place after those).
  const auto order = [](const StageSummary& s) {
    const std::span<const ref::StageDef> names = ref::stages();
    const auto it = std::find_if(names.begin(), names.end(), [&](const ref::StageDef& n) { return n.name == s.stage; });
    return it - names.begin();
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const StageSummary& a, const StageSummary& b) { return order(a) < order(b); });
  return out;
}

}  // namespace dsv4::verify
