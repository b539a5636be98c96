#pragma once
// Checkpoints of a long precision report: each policy's figures for one seed, written when that
// seed's run ends, so that a killed report over many seeds and policies resumes where it stopped
// (precision-report --checkpoint DIR). One file per seed and policy:
//   DIR/seed-<seed>/<policy>.json   {"format": "dsv4-precision-checkpoint", "format_version",
//                                    "input": {"description", "config"}, "position_bucket",
//                                    "policy": {"name", "description"}, "figures": {...}}
// A checkpoint names the input and the policy it was made for; one made for another input (other
// dims, length, activation model, seed) or for a policy whose switches have changed is an error
// naming the file, never silently reused.
#include <cstdint>
#include <filesystem>
#include <optional>

#include "reference/precision.h"
#include "verify/precision/input_info.h"
#include "verify/precision/report_figures.h"

namespace dsv4::verify {

inline constexpr const char* kCheckpointFormat = "dsv4-precision-checkpoint";
inline constexpr int kCheckpointVersion = 1;

class CheckpointDir {
 public:
  // Creates the folder when absent; throws std::invalid_argument when the path is a file.
  explicit CheckpointDir(std::filesystem::path dir);

  const std::filesystem::path& path() const { return dir_; }
  std::filesystem::path file(uint64_t seed, const std::string& policy) const;

  // The figures of `policy` for one seed's input (`seed_input`: that seed's InputInfo), or nothing
  // when no checkpoint exists. Throws std::invalid_argument naming the file when it cannot be read
  // or was made for another input, position bucket or policy.
  std::optional<PolicyFigures> load(uint64_t seed, const ref::PrecisionPolicy& policy, const InputInfo& seed_input,
                                    int64_t position_bucket) const;
  // Written whole or not at all.
  void store(const PolicyFigures& figures, const InputInfo& seed_input, int64_t position_bucket) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace dsv4::verify
