#include "verify/capture/isolated_read.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <stdexcept>
#include <vector>

#include "verify/capture/capture_codec.h"

namespace dsv4::verify {

namespace {

using Clock = std::chrono::steady_clock;

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer reserves terabytes of address space and does not run under RLIMIT_AS (a child
// whose mmap fails can hang inside ASan's allocator): a sanitizer build leaves the memory limit to
// ASan's own allocation limits, and the time limit stops the rest.
constexpr bool kLimitAddressSpace = false;
#else
constexpr bool kLimitAddressSpace = true;
#endif

// What the child sends first: how its read ended.
enum class Outcome : uint8_t { capture = 'C', capture_error = 'E', out_of_memory = 'M', other_error = 'X' };

// The child's end of the pipe, buffered. A failed write ends the child (the parent is gone or has
// given up on it).
class PipeSink : public ByteSink {
 public:
  explicit PipeSink(int fd) : fd_(fd) { buffer_.reserve(kBuffer); }
  void write(const void* data, std::size_t size) override {
    const char* bytes = static_cast<const char*>(data);
    if (buffer_.size() + size > kBuffer) flush();
    if (size >= kBuffer) return write_all(bytes, size);
    buffer_.insert(buffer_.end(), bytes, bytes + size);
  }
  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

 private:
  static constexpr std::size_t kBuffer = std::size_t{1} << 20;
  void write_all(const char* bytes, std::size_t size) {
    while (size > 0) {
      const ssize_t n = ::write(fd_, bytes, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ::_exit(3);
      bytes += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  int fd_;
  std::vector<char> buffer_;
};

struct PipeEnded {};  // the child closed its end (it exited or died) before sending all it should
struct DeadlinePassed {};

// The parent's end of the pipe: every read waits at most until the deadline.
class PipeSource : public ByteSource {
 public:
  PipeSource(int fd, Clock::time_point deadline) : fd_(fd), deadline_(deadline) {}
  void read(void* data, std::size_t size) override {
    char* out = static_cast<char*>(data);
    while (size > 0) {
      if (begin_ == end_) {
        if (size >= kBuffer) {  // large values go straight into place
          const std::size_t n = read_some(out, size);
          out += n;
          size -= n;
          continue;
        }
        begin_ = 0;
        end_ = read_some(buffer_.data(), kBuffer);
      }
      const std::size_t n = std::min(size, end_ - begin_);
      std::memcpy(out, buffer_.data() + begin_, n);
      begin_ += n;
      out += n;
      size -= n;
    }
  }

 private:
  static constexpr std::size_t kBuffer = std::size_t{1} << 16;
  std::size_t read_some(char* out, std::size_t size) {
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) throw DeadlinePassed{};
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, std::numeric_limits<int>::max())));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
      if (ready == 0) continue;  // the deadline is checked at the top
      const ssize_t n = ::read(fd_, out, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(std::string("read: ") + std::strerror(errno));
      if (n == 0) throw PipeEnded{};
      return static_cast<std::size_t>(n);
    }
  }
  int fd_;
  Clock::time_point deadline_;
  std::vector<char> buffer_ = std::vector<char>(kBuffer);
  std::size_t begin_ = 0, end_ = 0;
};

void send_string(ByteSink& sink, const std::string& s) {
  const uint64_t size = s.size();
  sink.write(&size, sizeof size);
  sink.write(s.data(), s.size());
}

std::string receive_string(ByteSource& source) {
  uint64_t size = 0;
  source.read(&size, sizeof size);
  if (size > (uint64_t{1} << 24)) throw std::runtime_error("a message longer than 16 MiB");
  std::string s(size, '\0');
  source.read(s.data(), s.size());
  return s;
}

// The address space this process has mapped now, in bytes (0 when /proc cannot tell).
uint64_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  return pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

void limit(int resource, uint64_t value) {
  rlimit r{};
  if (::getrlimit(resource, &r) != 0) return;
  if (r.rlim_max != RLIM_INFINITY && value > r.rlim_max) value = r.rlim_max;
  r.rlim_cur = value;
  ::setrlimit(resource, &r);
}

// The child: limits, no terminal output, read_capture, the outcome through the pipe, _exit (no
// atexit handlers or buffered output of the parent's run twice).
[[noreturn]] void read_in_child(int fd, const std::string& path, const ReadOptions& options, const ReadLimits& limits) {
  const int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    for (int stream : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) ::dup2(null_fd, stream);
  }
  limit(RLIMIT_CORE, 0);
  const uint64_t inherited = mapped_bytes();
  if (kLimitAddressSpace && inherited > 0 && static_cast<uint64_t>(limits.memory_bytes) < RLIM_INFINITY - inherited) {
    limit(RLIMIT_AS, inherited + static_cast<uint64_t>(limits.memory_bytes));
  }
  // A backstop in case the parent dies without stopping the child: CPU time never exceeds the wall
  // clock of a single-threaded read.
  limit(RLIMIT_CPU, static_cast<uint64_t>(std::ceil(limits.seconds)) + 1);

  PipeSink sink(fd);
  auto send_outcome = [&](Outcome outcome) {
    const uint8_t byte = static_cast<uint8_t>(outcome);
    sink.write(&byte, 1);
  };
  try {
    Capture capture = read_capture(path, options);
    send_outcome(Outcome::capture);
    encode_capture(capture, sink);
  } catch (const CaptureError& e) {
    send_outcome(Outcome::capture_error);
    for (const std::string* part : {&e.file(), &e.object(), &e.expected(), &e.found()}) send_string(sink, *part);
  } catch (const std::bad_alloc&) {
    send_outcome(Outcome::out_of_memory);
  } catch (const std::exception& e) {
    send_outcome(Outcome::other_error);
    send_string(sink, e.what());
  } catch (...) {
    send_outcome(Outcome::other_error);
    send_string(sink, "an exception that is not a std::exception");
  }
  sink.flush();
  ::_exit(0);
}

std::string seconds_text(double s) { return fmt::format("{:g} s", s); }
std::string mib_text(int64_t bytes) { return fmt::format("{} MiB", bytes >> 20); }

CaptureError out_of_time(const std::string& path, const ReadLimits& limits) {
  return CaptureError(
      path, "/", fmt::format("a read within {} ({} sets the limit)", seconds_text(limits.seconds), kReadSecondsEnv),
      fmt::format("a read still going after {}, stopped", seconds_text(limits.seconds)));
}

CaptureError out_of_memory(const std::string& path, const ReadLimits& limits) {
  return CaptureError(
      path, "/",
      fmt::format("a read within {} of memory ({} sets the limit)", mib_text(limits.memory_bytes), kReadMemoryEnv),
      "a read that needs more (out of memory)");
}

// How the child ended, when it did not hand over an outcome.
CaptureError ended_without_outcome(const std::string& path, const ReadLimits& limits, int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    if (signal == SIGXCPU) return out_of_time(path, limits);
    const char* name = ::sigabbrev_np(signal);
    const std::string signal_text = fmt::format("signal {}, SIG{}", signal, name ? name : "?");
    if (signal == SIGKILL) {
      return CaptureError(
          path, "/", "a read the system lets finish",
          fmt::format("the reading process killed ({}; by the kernel's out-of-memory killer?)", signal_text));
    }
    return CaptureError(path, "/", "a file the HDF5 library reads without crashing",
                        fmt::format("a crash while reading it ({}): a damaged file", signal_text));
  }
  return CaptureError(path, "/", "a readable capture",
                      fmt::format("the reading process ended with exit status {} before handing over a result "
                                  "(a damaged file; a sanitizer build reports its findings this way)",
                                  WIFEXITED(status) ? WEXITSTATUS(status) : -1));
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 0;
  }
  return status;
}

double positive_number(const char* variable, const char* value) {
  char* end = nullptr;
  const double v = std::strtod(value, &end);
  if (end == value || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    throw std::invalid_argument(fmt::format("{}={}: expected a positive number", variable, value));
  }
  return v;
}

}  // namespace

ReadLimits ReadLimits::for_file(const std::string& path) {
  ReadLimits limits;
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  limits.seconds = 60.0 + (error ? 0.0 : static_cast<double>(size) / (10.0 * (1 << 20)));
  limits.memory_bytes = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  if (const char* v = std::getenv(kReadSecondsEnv); v && *v) limits.seconds = positive_number(kReadSecondsEnv, v);
  if (const char* v = std::getenv(kReadMemoryEnv); v && *v) {
    const double mib = std::min(positive_number(kReadMemoryEnv, v), 1e12);  // 1e12 MiB: more than any machine
    limits.memory_bytes = static_cast<int64_t>(mib * (1 << 20));
  }
  return limits;
}

Capture read_capture_isolated(const std::string& path, const ReadOptions& options,
                              const std::optional<ReadLimits>& given_limits) {
  const ReadLimits limits = given_limits ? *given_limits : ReadLimits::for_file(path);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.seconds));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(error));
  }
  if (pid == 0) {
    ::close(fds[0]);
    read_in_child(fds[1], path, options, limits);
  }
  ::close(fds[1]);

  // The outcome, then the child reaped (stopped first when it is not done). No exception leaves
  // before the child is reaped.
  PipeSource source(fds[0], deadline);
  std::optional<Capture> capture;
  std::optional<CaptureError> error;
  bool stop = false;
  bool ended_early = false;
  try {
    uint8_t outcome = 0;
    source.read(&outcome, 1);
    switch (static_cast<Outcome>(outcome)) {
      case Outcome::capture: capture = decode_capture(source, options.max_dataset_elements); break;
      case Outcome::capture_error: {
        std::string parts[4];
        for (std::string& part : parts) part = receive_string(source);
        error.emplace(parts[0], parts[1], parts[2], parts[3]);
        break;
      }
      case Outcome::out_of_memory: error = out_of_memory(path, limits); break;
      case Outcome::other_error: error.emplace(path, "/", "a readable capture", receive_string(source)); break;
      default:
        stop = true;
        error.emplace(path, "/", "a readable capture",
                      fmt::format("an unknown outcome {} from the reading process", outcome));
    }
  } catch (const DeadlinePassed&) {
    stop = true;
    error = out_of_time(path, limits);
  } catch (const PipeEnded&) {
    ended_early = true;
  } catch (const std::exception& e) {
    stop = true;
    error.emplace(path, "/", "a readable capture",
                  fmt::format("a malformed hand-over from the reading process ({})", e.what()));
  }
  if (stop) ::kill(pid, SIGKILL);
  ::close(fds[0]);
  const int status = wait_for(pid);
  if (ended_early) throw ended_without_outcome(path, limits, status);
  if (error) throw *error;
  return std::move(*capture);
}

}  // namespace dsv4::verify
