#pragma once
// The precision report as Markdown: what it ran on (input kind, producer, weights' origin and what
// that means for the numbers), the policies, then per layer the end-to-end table (top-k recall,
// attention-output and layer-output error), recall by query position, and per-stage NMSE,
// cos-diff and max relative error (stages x policies).
#include <filesystem>
#include <ostream>

#include "verify/precision/precision_report.h"

namespace dsv4::verify {

void write_precision_markdown(std::ostream& out, const PrecisionReport& report);

// Written whole or not at all (verify/report/atomic_file.h).
void write_precision_markdown_file(const std::filesystem::path& path, const PrecisionReport& report);

// A figure as the tables print it: "0" for zero, else 3 significant digits ("1.23e-05", "0.998").
std::string format_figure(double v);

}  // namespace dsv4::verify
