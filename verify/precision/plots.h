#pragma once
// Plots of a precision report: scripts/plot_precision_report.py (matplotlib) run on the JSON report;
// it writes PNG and SVG files into a temporary folder and moves each into place, so every plot is
// whole or absent.
#include <filesystem>
#include <string>

namespace dsv4::verify {

struct PlotCommand {
  std::string python;  // the interpreter
  std::string script;  // plot_precision_report.py
};

// The build's Python interpreter and plot_precision_report.py of the data directory
// (verify/paths/data_dir.h: a copy of scripts/plot_precision_report.py), or the script the
// environment variable DSV4_PLOT_SCRIPT names (tests use it to inject a failure).
PlotCommand default_plot_command();

// Asks the script whether it can plot (`--check`: the interpreter runs and matplotlib imports).
// Throws std::runtime_error with the reason otherwise; run it before a long report.
void check_plotting(const PlotCommand& command);

// Plots of the JSON report `json` into `dir` (created when absent). Throws std::runtime_error when
// the script cannot be started or fails.
void make_plots(const PlotCommand& command, const std::filesystem::path& json, const std::filesystem::path& dir);

}  // namespace dsv4::verify
