// File output that never leaves a partial file behind.
#pragma once

#include <string>
#include <string_view>

namespace shardsim {

// Writes `bytes` to `path` through a temporary file in the same directory, fsyncs it and renames
// it into place, so a reader sees the old file or the complete new one, never a prefix.
// Throws InputError naming the path when the directory is missing, read-only or full.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Reads a whole file. Throws InputError naming the path when it is missing or unreadable.
std::string read_file(const std::string& path);

}  // namespace shardsim
