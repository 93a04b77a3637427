// File input and output for every command. Inputs are hostile: only regular files are read, never
// beyond a stated size. Outputs never leave a partial file behind, even when interrupted, and are
// checked before any work so that a bad path writes nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardsim {

// ---------------------------------------------------------------------------------------------
// Reading.

// The default cap of read_file: 1 GiB.
inline constexpr std::uint64_t kDefaultReadLimit = std::uint64_t{1} << 30;

// A regular file opened for reading. Anything else (a directory, a device such as /dev/zero, a
// FIFO, a socket; also through a symlink) is refused when it is opened, before anything is read,
// so no input can block or never end.
class InputFile {
 public:
  // Throws InputError "PATH: why" when `path` is missing, unreadable or not a regular file.
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }  // when it was opened
  // Bytes [offset, offset + count). REQUIRES: offset + count <= size(). Throws InputError naming
  // the path on a read error or when the file shrank.
  std::string read(std::uint64_t offset, std::uint64_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// The whole of regular file `path`. Throws InputError naming the path when it is missing,
// unreadable, not a regular file, or larger than `max_bytes` (the message gives both sizes).
std::string read_file(const std::string& path, std::uint64_t max_bytes = kDefaultReadLimit);

// ---------------------------------------------------------------------------------------------
// Checking outputs before any work.

// One output a command was asked to write.
struct OutputRequest {
  std::string flag;  // "--report", "--golden", ... (names the output in messages)
  std::string path;
  bool directory = false;  // a directory of files (--golden); otherwise one file
  // For a directory: the names it will write there (a file output or an input with one of them
  // would be overwritten), and a suffix every other written name has (".npy"; "" for none).
  std::vector<std::string> written_names;
  std::string written_suffix;
};

// Refuses, with one InputError "FLAG PATH: why", before anything is computed or written:
//   an empty path;
//   a file output that exists as a directory, a device, a FIFO or a socket (also through a
//   symlink); a directory output that exists as anything but a directory;
//   an output that is one of `inputs` (the same file, whatever the path says), or that a
//   directory output would overwrite, or that another output names too;
//   a missing or unwritable parent directory (an existing directory output must be writable).
// A symlink to a regular file is followed: the file it points to is the one replaced.
void check_outputs(const std::vector<OutputRequest>& outputs,
                   const std::vector<std::string>& inputs);

// ---------------------------------------------------------------------------------------------
// Writing atomically.

// Writes `bytes` to `path` through a temporary file in the same directory (PATH.tmp.PID), fsyncs
// it and renames it into place, so a reader sees the old file or the complete new one, never a
// prefix. A symlink at `path` is followed (its target is replaced). Throws InputError naming the
// path when the directory is missing, read-only or full; the temporary file is removed first.
// While the temporary file exists it is registered with a handler for SIGINT, SIGTERM, SIGHUP
// and SIGQUIT (installed on first use, unless the signal is ignored or already handled) that
// unlinks it, restores the default action and re-raises, so an interrupted write leaves the
// previous file or nothing, and no temporary file.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Writes several files as one unit: every file goes to its temporary name first (all registered
// with the signal handler above), and only when all of them are complete and fsynced are they
// renamed into place, in the given order (put a manifest last). An error or one of the signals
// before the renames leaves every previous file untouched and no temporary file; when
// `remove_dir_if_empty` is not empty, that directory (one the caller just created) is removed
// as well if nothing else is in it, so a failed write into a new directory leaves nothing.
void write_files_atomically(const std::vector<std::pair<std::string, std::string_view>>& files,
                            const std::string& remove_dir_if_empty = "");

}  // namespace shardsim
