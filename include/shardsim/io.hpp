// File output that never leaves a partial file behind, even when interrupted.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardsim {

// Writes `bytes` to `path` through a temporary file in the same directory (PATH.tmp.PID), fsyncs
// it and renames it into place, so a reader sees the old file or the complete new one, never a
// prefix. Throws InputError naming the path when the directory is missing, read-only or full;
// the temporary file is removed first.
// While the temporary file exists it is registered with a SIGINT/SIGTERM handler (installed on
// first use, unless the signal is ignored) that unlinks it, restores the default action and
// re-raises, so an interrupted write leaves the previous file or nothing, and no temporary file.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Writes several files as one unit: every file goes to its temporary name first (all registered
// with the signal handler above), and only when all of them are complete and fsynced are they
// renamed into place, in the given order (put a manifest last). An error or a SIGINT/SIGTERM
// before the renames leaves every previous file untouched and no temporary file; when
// `remove_dir_if_empty` is not empty, that directory (one the caller just created) is removed
// as well if nothing else is in it, so a failed write into a new directory leaves nothing.
void write_files_atomically(const std::vector<std::pair<std::string, std::string_view>>& files,
                            const std::string& remove_dir_if_empty = "");

// Reads a whole file. Throws InputError naming the path when it is missing or unreadable.
std::string read_file(const std::string& path);

}  // namespace shardsim
