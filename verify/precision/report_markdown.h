#pragma once
// The precision report as Markdown: what it ran on (input kind, producer, weights' origin and what
// that means for the numbers, the seeds and the activation model), the policies with what each
// changes from official and the oracle's time, then per layer the end-to-end table (top-k recall,
// attention-output and layer-output error), the rankings the 95% intervals support, per-row recall
// pooled over seeds, recall and output error by query position, and per-stage NMSE, cos-diff and
// max relative error (stages x policies). Every figure is "mean [low, high]" over seeds, or the
// figure alone for one seed.
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "verify/precision/over_seeds.h"

namespace dsv4::verify {

void write_precision_markdown(std::ostream& out, const SeededReport& report);

// Written whole or not at all (verify/report/atomic_file.h).
void write_precision_markdown_file(const std::filesystem::path& path, const SeededReport& report);

// A figure as the tables print it: "0" for zero, else 3 significant digits ("1.23e-05", "0.998").
std::string format_figure(double v);
// A recall as the tables print it: 4 decimals ("0.9602", "1").
std::string format_recall(double v);
// "mean [low, high]", or the mean alone without an interval, each with `format`.
std::string format_interval(const Interval& i, std::string (*format)(double) = format_figure);

// The policies sorted by a figure (best first: higher when `higher_is_better`), joined by " > " where
// the 95% intervals of neighbours separate and " ~ " where they overlap. Empty without intervals.
struct RankedPolicy {
  std::string name;
  const Interval* figure;
};
std::string ranking(std::vector<RankedPolicy> policies, bool higher_is_better);

}  // namespace dsv4::verify
