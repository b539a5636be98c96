#pragma once
// Files written whole or not at all: the content goes to a new temporary file in the target's
// directory, is flushed to disk, and is renamed over the target; on any error the temporary file
// is removed, the target is left as it was, and the error is thrown.
#include <filesystem>
#include <functional>
#include <ostream>
#include <string_view>

namespace dsv4::verify {

// Throws std::runtime_error naming the path and the system's reason.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

// Runs `write` into memory first: when it throws, no file is touched and its exception propagates.
void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);

}  // namespace dsv4::verify
