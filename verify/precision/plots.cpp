#include "verify/precision/plots.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "verify/paths/data_dir.h"

extern char** environ;

namespace dsv4::verify {

namespace {

// Runs argv[0] (searched in PATH) with argv and waits: -> its exit status. Its output goes to ours.
int run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (spawned != 0) throw std::runtime_error("cannot run " + args.front() + ": " + std::strerror(spawned));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("cannot wait for " + args.front() + ": " + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

PlotCommand default_plot_command() {
  const char* script = std::getenv("DSV4_PLOT_SCRIPT");
  return {DSV4_PLOT_PYTHON, script && *script ? script : (data_dir() / "plot_precision_report.py").string()};
}

void check_plotting(const PlotCommand& c) {
  if (!std::filesystem::is_regular_file(c.script))
    throw std::runtime_error("plots: the plot script " + c.script + " does not exist");
  const int status = run_process({c.python, c.script, "--check"});
  if (status != 0)
    throw std::runtime_error("plots: `" + c.python + " " + c.script + " --check` failed with exit status " +
                             std::to_string(status) + " (is matplotlib installed? scripts/install-deps.sh)");
}

void make_plots(const PlotCommand& c, const std::filesystem::path& json, const std::filesystem::path& dir) {
  const int status = run_process({c.python, c.script, json.string(), "--out", dir.string()});
  if (status != 0)
    throw std::runtime_error("plots: " + c.script + " failed with exit status " + std::to_string(status));
}

}  // namespace dsv4::verify
