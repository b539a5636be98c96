#pragma once
// The text of a record's fields, shared by the console and Markdown writers, so that both say the
// same thing in the same words.
#include <string>
#include <vector>

#include "verify/report/record.h"

namespace dsv4::verify {

std::string format_metric(double v);             // "3.906e-03"; "nan", "inf", "-inf"
std::string format_value(double v);              // a tensor value, enough digits to tell neighbours apart
std::string format_element(const ElementAt& e);  // "@[0,3,17] (ref 0.5, got 0.50390625)"; "-" when none
std::string format_ratio(double ratio);          // measured / allowed: "0.37", "1.8e+03", "inf"
std::string stage_label(const Record& r);        // "L2 c0 attn/core"
std::string stage_label(const StageId& id);

// The metric cells of a compared record, in column order (empty for a record not compared).
std::vector<std::string> metric_cells(const Record& r);

// The rounding census of the comparison a record's verdict comes from (compare_rounded), in one cell: "rounding
// e2m1/b32/ue8m0: 189 of 40960 differ, flips 189 (189 explained), 0 unexplained, ties 1210 (189 flipped), toward zero
// 189 / away 0 (p 1.3e-57)"; "" for other records.
std::string rounding_cell(const Record& r);

// The worst row and token of a dense record: "row cos_diff 1.2e-05 @[0,3,1] nmse 2.4e-05 @[0,3,1]
// max_abs/rms 0.031 @[0,3,1,7]"; "" for other records.
std::string group_cell(const Record& r);

// What failed and against which limits, for a FAIL record ("" otherwise); for a record whose
// verdict is a comparison of its own (chained), that comparison's.
std::string failure_detail(const Record& r);

// How close a compared record came to failing: "0.37 of elementwise" (measured / allowed of its
// verdict's closest gate; "(own error)" when that is not the record's metrics); "-" for a record
// not compared or vacuous.
std::string margin_cell(const Record& r);

// The command that replays exactly one record: "dsv4-verify replay FILE [options] --layer L
// --call K --stage S" (the file quoted for the shell where needed).
std::string replay_command(const Report& report, const StageId& id);

// "summary: 57 passed, 1 failed, 3 skipped": the closing line CI recognises ("N passed, N failed"
// with ", N skipped" after it); skipped counts MISSING, SKIPPED and VACUOUS records.
std::string summary_line(const StatusCounts& c);

// "first failure: layer 2, call 0, attn/core" or "first failure: none".
std::string first_failure_line(const Report& report);

// The stages whose every record is VACUOUS: "vacuous in every call: compressor/entries (layer 2)",
// or "" when there is none.
std::string vacuous_everywhere_line(const Report& report);

}  // namespace dsv4::verify
