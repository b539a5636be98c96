#pragma once
// A tolerance table: one Tolerance row per stage for one precision policy, read from
// data/tolerances/<precision>.json. The format, and why each number is what it is, are in
// docs/tolerances.md. Every row carries its reason; a file that breaks a rule is refused whole.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "verify/tolerance/tolerance.h"

namespace dsv4::verify {

// The directory of the tolerance files: tolerances/ in the data directory (verify/paths/data_dir.h),
// a copy of data/tolerances/. Throws std::runtime_error naming where it looked when there is none.
std::filesystem::path default_tolerance_dir();

class ToleranceTable {
 public:
  // Reads a table file. Throws std::invalid_argument naming the file (and the key, where one is at
  // fault) when the file cannot be read, is not JSON, misses "precision" or "stages", names a stage
  // the registry does not compare (x, cache/..., or no stage at all), has a row without "reason",
  // "atol" or "rtol", a negative or non-finite number, a key a row does not take, or a "precision" that is not the
  // file's stem.
  static ToleranceTable load(const std::filesystem::path& file);

  // The same checks on JSON text; `source` names it in messages (the stem rule is not applied).
  static ToleranceTable parse(std::string_view json_text, const std::string& source);

  // The table of a precision policy: dir/<precision>.json; for a policy other than "exact" and
  // "official" without a file of its own, dir/lowp.json (the envelope of the low-precision
  // policies, docs/tolerances.md). Throws as load does.
  static ToleranceTable for_precision(const std::string& precision,
                                      const std::filesystem::path& dir = default_tolerance_dir());

  // The stage's row, or the "default" row for a dense stage without one. Throws
  // std::invalid_argument for a name that is not a compared stage and std::out_of_range when there
  // is no row to use (an index-set stage never takes the default: its atol/rtol mean scores).
  const Tolerance& at(std::string_view stage) const;

  bool has_row(std::string_view stage) const { return rows_.find(stage) != rows_.end(); }
  const std::string& precision() const { return precision_; }
  const std::string& source() const { return source_; }  // the file (or name) it was read from
  const std::map<std::string, Tolerance, std::less<>>& rows() const { return rows_; }
  const std::optional<Tolerance>& default_row() const { return default_; }

 private:
  std::string precision_;
  std::string source_;
  std::map<std::string, Tolerance, std::less<>> rows_;
  std::optional<Tolerance> default_;
};

}  // namespace dsv4::verify
