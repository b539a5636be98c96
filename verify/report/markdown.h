#pragma once
// The Markdown report: a header with the run's identity, the first failure and the command that
// replays it, the stages vacuous in every call, one line per stage (its counts and worst record),
// one table for the dense stages and one for the index-set stages (a row per record), a list of
// the records not compared (MISSING, SKIPPED, VACUOUS), and the summary line.
#include <filesystem>
#include <ostream>

#include "verify/report/record.h"

namespace dsv4::verify {

void write_markdown(std::ostream& out, const Report& report);

// Written whole or not at all (atomic_file.h).
void write_markdown_file(const std::filesystem::path& path, const Report& report);

}  // namespace dsv4::verify
