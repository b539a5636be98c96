#include "verify/report/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dsv4::verify {

namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path, int error) {
  throw std::runtime_error(what + " " + path.string() + ": " + std::strerror(error));
}

// A new file beside `target`, created exclusively (never someone else's file), mode 0666 less umask.
std::pair<int, std::filesystem::path> create_temporary(const std::filesystem::path& target) {
  std::random_device entropy;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::filesystem::path temp =
        target.parent_path() / fmt::format(".{}.tmp-{}-{}", target.filename().string(), ::getpid(), entropy());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return {fd, temp};
    if (errno != EEXIST) fail("cannot create a temporary file for", target, errno);
  }
  fail("cannot find a free temporary name for", target, EEXIST);
}

void write_all(int fd, std::string_view content, const std::filesystem::path& temp) {
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", temp, n < 0 ? errno : EIO);
    content.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  if (path.filename().empty()) throw std::runtime_error("cannot write " + path.string() + ": not a file name");
  auto [fd, temp] = create_temporary(path);
  try {
    write_all(fd, content, temp);
    if (::fsync(fd) != 0) fail("cannot flush", temp, errno);
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0) fail("cannot close", temp, errno);
    if (::rename(temp.c_str(), path.c_str()) != 0) fail("cannot rename a temporary file onto", path, errno);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
}

void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write) {
  std::ostringstream content;
  write(content);
  if (!content) throw std::runtime_error("cannot write " + path.string() + ": the content stream failed");
  write_file_atomically(path, content.view());
}

}  // namespace dsv4::verify
