#pragma once
// The precision report over several seeds of synthetic inputs (precision-report --synth --seeds N):
// seed s = first, first + 1, ... draws its own weights and inputs; each seed runs the exact policy and
// every policy (precision_report.h), and the figures are combined over seeds with 95% intervals
// (over_seeds.h). With a checkpoint folder, each seed's figures are written per policy when the
// seed's run ends, and a later run with the same options loads them instead of running them again:
// a seed runs only the policies it lacks (with the exact policy again), and none when it lacks none.
#include <functional>
#include <optional>
#include <string>

#include "verify/capture/capture.h"
#include "verify/precision/checkpoint.h"
#include "verify/precision/over_seeds.h"
#include "verify/precision/precision_report.h"
#include "verify/precision/synthetic_input.h"

namespace dsv4::verify {

struct SeededReportOptions {
  SyntheticInputOptions input;  // input.seed: the first seed
  int seeds = 1;                // >= 1
  PrecisionReportOptions report;
  std::optional<std::filesystem::path> checkpoint;  // the checkpoint folder, if any
};

// The seeds the options run, in order.
std::vector<uint64_t> seeds_of(const SeededReportOptions& options);

// Throws std::invalid_argument for bad options (a seed count < 1, what synthetic_input and
// run_precision_report refuse) and for a checkpoint made for other options (checkpoint.h).
SeededReport run_seeded_report(const SeededReportOptions& options,
                               const std::function<void(const PrecisionProgress&)>& progress = {});

// One capture's report as a report over one "seed" (no intervals).
SeededReport single_report(const PrecisionReport& report);

}  // namespace dsv4::verify
