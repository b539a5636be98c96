#pragma once
// Where the verifier's data lives: the directory share/dsv4_oracle, holding tolerances/ (the
// tolerance tables, data/tolerances/ in the source tree) and plot_precision_report.py (the
// precision report's plot script). Nothing is looked up in the source tree: a binary finds the data
//   1. in the directory the environment variable DSV4_DATA_DIR names, when it is set and not empty
//      (it must then exist: a wrong setting is an error, not a fall-through);
//   2. else in the nearest share/dsv4_oracle at or above the running executable's directory:
//      <prefix>/share/dsv4_oracle for an installed <prefix>/bin/dsv4-verify, and
//      <build>/share/dsv4_oracle, which the build fills (cmake/dsv4_data_dir.cmake), for every
//      binary of a build tree.
// A program outside both (a consumer project's test linked against dsv4_oracle::verify, say) sets
// DSV4_DATA_DIR or passes directories explicitly (the package sets dsv4_oracle_DATA_DIR).
#include <filesystem>

namespace dsv4::verify {

inline constexpr const char* kDataDirEnv = "DSV4_DATA_DIR";

// The data directory as above. Throws std::runtime_error naming where it looked when there is none.
std::filesystem::path data_dir();

// data_dir()'s search, given the environment's value (nullptr: unset) and the executable's path.
std::filesystem::path find_data_dir(const char* env_value, const std::filesystem::path& executable);

}  // namespace dsv4::verify
