#pragma once
// The precision report as JSON (nlohmann); non-finite numbers as "nan" / "inf" / "-inf"
// (verify/report/json.h json_number):
//   {"format": "dsv4-precision-report", "format_version": 1, "command",
//    "input": {"kind", "file", "producer", "model", "description", "weights", "weights_reason",
//              "config": {dims}},
//    "reference": "exact", "position_bucket",
//    "error_histogram": {"quantity", "low", "step", "bins"}, "recall_histogram": {"bins", "rows"},
//    "policies": [{"name", "description", "settings": {...}, "seconds",
//                  "layers": [{"layer", "compress_ratio",
//                              "stages": [{"stage", "note", "n", "n_finite", "nonfinite_matched",
//                                          "nonfinite_mismatches", "nmse", "cos_diff", "max_rel",
//                                          "max_abs", "ref_rms", "histogram": {...}}],
//                              "end_to_end": {"topk_recall": {...} or null,
//                                             "attention_output": {...}, "layer_output": {...}}}]}]}
#include <filesystem>
#include <nlohmann/json.hpp>

#include "reference/precision.h"
#include "verify/precision/precision_report.h"

namespace dsv4::verify {

inline constexpr const char* kPrecisionReportFormat = "dsv4-precision-report";
inline constexpr int kPrecisionReportVersion = 1;

nlohmann::json to_json(const PrecisionReport& report);
// Every switch of the policy: storages, linear kind, block formats ("e4m3/b64/ue8m0" or null), flags.
nlohmann::json settings_json(const ref::PrecisionPolicy& policy);

// The report as compact JSON text (one line: the per-stage histograms make an indented report several
// times larger), written whole or not at all (verify/report/atomic_file.h).
void write_precision_json_file(const std::filesystem::path& path, const PrecisionReport& report);

}  // namespace dsv4::verify
