#pragma once
// The text of a record's fields, shared by the console and Markdown writers, so that both say the
// same thing in the same words.
#include <string>
#include <vector>

#include "verify/report/record.h"

namespace dsv4::verify {

std::string format_metric(double v);           // "3.906e-03"; "nan", "inf", "-inf"
std::string format_value(double v);            // a tensor value, enough digits to tell neighbours apart
std::string format_element(const ElementAt& e); // "@[0,3,17] (ref 0.5, got 0.50390625)"; "-" when none
std::string stage_label(const Record& r);       // "L2 c0 attn/core"
std::string stage_label(const StageId& id);

// The metric cells of a compared record, in column order (empty for a record not compared).
std::vector<std::string> metric_cells(const Record& r);

// What failed and against which limits, for a FAIL record ("" otherwise).
std::string failure_detail(const Record& r);

// "summary: 57 passed, 1 failed, 3 skipped": the closing line CI recognises ("N passed, N failed"
// with ", N skipped" after it); skipped counts MISSING and SKIPPED records.
std::string summary_line(const StatusCounts& c);

// "first failure: layer 2, call 0, attn/core" or "first failure: none".
std::string first_failure_line(const Report& report);

}  // namespace dsv4::verify
