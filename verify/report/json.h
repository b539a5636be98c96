#pragma once
// The JSON report (nlohmann):
//   {"file", "mode", "precision", "backend", "tolerances", "command",
//    "summary": {"passed", "failed", "vacuous", "missing", "skipped"},
//    "first_failure": {"layer", "call", "stage", "replay": the command replaying that record} or null,
//    "stages": [{"stage", "counts": {as summary}, "layers", "worst": {"layer", "call", "status",
//                "worst_ratio"} or null}],
//    "vacuous_everywhere": [{"stage", "layers"}],
//    "records": [{"layer", "call", "stage", "status", "shape", "dtype", "note",
//                 "comparator": "dense" | "rounded" | "index_set" | null, "tolerance": {...} or null,
//                 "metrics": {...} or null, "verdict_metrics": {...} or null}]}
// verdict_metrics: the comparison the status comes from when it is not "metrics" (chained replay:
// the stage against its recomputation from the captured inputs).
// Dense metrics carry "rows" and "tokens" (the worst group, GroupMetrics), "worst_ratio" with its
// gate, and for the rounded comparator "rounding" (the flip census, FlipCensus).
// JSON has no NaN or infinity: a non-finite number is written as the string "nan", "inf" or
// "-inf" (read it back with json_number). Element positions are {"index", "coord", "ref", "got"},
// or null when there is none.
#include <nlohmann/json.hpp>

#include <filesystem>

#include "verify/report/record.h"

namespace dsv4::verify {

nlohmann::json to_json(const Report& report);
nlohmann::json to_json(const Record& record);
nlohmann::json to_json(const DenseMetrics& m);
nlohmann::json to_json(const IndexSetMetrics& m);
nlohmann::json to_json(const Tolerance& t);

// A number as written: a JSON number, or "nan" / "inf" / "-inf".
nlohmann::json json_number(double v);
// Its inverse; throws std::invalid_argument for anything else.
double json_number(const nlohmann::json& j);

// The report as indented JSON text, written whole or not at all (atomic_file.h).
void write_json_file(const std::filesystem::path& path, const Report& report);

}  // namespace dsv4::verify
