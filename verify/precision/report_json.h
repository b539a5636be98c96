#pragma once
// The precision report as JSON (nlohmann); non-finite numbers as "nan" / "inf" / "-inf"
// (verify/report/json.h json_number). Every figure is an interval over seeds (over_seeds.h),
// I = {"mean", "low", "high", "values": [one per seed]}, low and high null without an interval
// (one seed, or a non-finite value):
//   {"format": "dsv4-precision-report", "format_version": 2, "command",
//    "input": {"kind", "file", "producer", "model", "description", "weights", "weights_reason",
//              "config": {dims}, "seeds": [...], "activation_model": {...} or null},
//    "reference": "exact", "position_bucket",
//    "interval": {"level", "over", "method", "pooled_recall"},
//    "reference_time": {"wall_seconds": I, "cpu_seconds": I},
//    "error_histogram": {"quantity", "low", "step", "bins"}, "recall_histogram": {"bins", "rows"},
//    "policies": [{"name", "description", "differences_from_official", "settings": {...},
//                  "time": {"wall_seconds": I, "cpu_seconds": I},
//                  "layers": [{"layer", "compress_ratio",
//                              "stages": [{"stage", "note", "n", "n_finite", "nonfinite_matched",
//                                          "nonfinite_mismatches", "nmse": I, "cos_diff": I,
//                                          "max_rel": I, "max_abs": I, "ref_rms": I,
//                                          "histogram": {pooled counts}}],
//                              "end_to_end": {"topk_recall": {"rows", "rows_with_choice", "mean": I,
//                                               "mean_with_choice": I, "worst": I,
//                                               "pooled_with_choice": I, "worst_row": {...} or null,
//                                               "by_position": [{"first_position", "last_position",
//                                                 "rows", "rows_with_choice", "mean": I,
//                                                 "mean_with_choice": I, "worst": I}],
//                                               "histogram": [pooled counts]} or null,
//                                             "attention_output": {"stage", "nmse": I, ...},
//                                             "layer_output": {"stage", "nmse": I, ...},
//                                             "output_by_position": [{"first_position",
//                                               "last_position", "attention_nmse": I,
//                                               "layer_nmse": I}]}}]}]}
// Row counts (n, rows, rows_with_choice) and histograms are summed over seeds.
#include <nlohmann/json.hpp>

#include <filesystem>

#include "reference/config.h"
#include "reference/precision.h"
#include "verify/precision/over_seeds.h"

namespace dsv4::verify {

inline constexpr const char* kPrecisionReportFormat = "dsv4-precision-report";
inline constexpr int kPrecisionReportVersion = 2;

nlohmann::json to_json(const SeededReport& report);
// Every switch of the policy: storages, linear kind, block formats ("e4m3/b64/ue8m0" or null), flags.
nlohmann::json settings_json(const ref::PrecisionPolicy& policy);
// The dims and lengths of a configuration.
nlohmann::json config_json(const ref::ModelConfig& config);
nlohmann::json to_json(const Interval& interval);

// The report as compact JSON text (one line: the per-stage histograms make an indented report several
// times larger), written whole or not at all (verify/report/atomic_file.h).
void write_precision_json_file(const std::filesystem::path& path, const SeededReport& report);

}  // namespace dsv4::verify
