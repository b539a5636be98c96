#include "verify/paths/data_dir.h"

#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>
#include <system_error>

namespace dsv4::verify {

namespace {

// The layout below the data directory's parent, as installed (GNUInstallDirs' DATADIR = share).
const std::filesystem::path kRelativeDataDir = std::filesystem::path("share") / "dsv4_oracle";

}  // namespace

std::filesystem::path find_data_dir(const char* env_value, const std::filesystem::path& executable) {
  if (env_value != nullptr && *env_value != '\0') {
    const std::filesystem::path dir(env_value);
    std::error_code error;
    if (!std::filesystem::is_directory(dir, error)) {
      throw std::runtime_error(fmt::format("{}={}: expected the data directory (holding tolerances/), found {}",
                                           kDataDirEnv, env_value, error ? error.message() : "no such directory"));
    }
    return dir;
  }
  const std::filesystem::path start = executable.parent_path();
  for (std::filesystem::path dir = start; !dir.empty(); dir = dir.parent_path()) {
    std::error_code error;
    if (std::filesystem::is_directory(dir / kRelativeDataDir, error)) return dir / kRelativeDataDir;
    if (dir == dir.root_path()) break;
  }
  throw std::runtime_error(fmt::format(
      "cannot find the data directory (the tolerance tables): expected {} at or above {} (where {} is), found "
      "none; install with cmake --install, or set {}",
      kRelativeDataDir.string(), start.string(), executable.filename().string(), kDataDirEnv));
}

std::filesystem::path data_dir() {
  std::error_code error;
  const std::filesystem::path executable = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw std::runtime_error("cannot find the data directory: /proc/self/exe: " + error.message());
  return find_data_dir(std::getenv(kDataDirEnv), executable);
}

}  // namespace dsv4::verify
