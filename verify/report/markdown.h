#pragma once
// The Markdown report: a header with the run's identity, the first failure, one table for the
// dense stages and one for the index-set stages, a list of stages not compared, and the summary line.
#include <filesystem>
#include <ostream>

#include "verify/report/record.h"

namespace dsv4::verify {

void write_markdown(std::ostream& out, const Report& report);

// Written whole or not at all (atomic_file.h).
void write_markdown_file(const std::filesystem::path& path, const Report& report);

}  // namespace dsv4::verify
