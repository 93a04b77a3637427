// Reading input files (io.hpp): regular files only, never beyond a stated size.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/io.hpp"

namespace shardsim {

namespace {

// What a non-regular file is, for the message.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISFIFO(mode)) return "a FIFO (pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

InputFile::InputFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below anyway.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw InputError(path + ": cannot open: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const int saved = errno;
    ::close(fd_);
    throw InputError(path + ": cannot open: " + std::strerror(saved));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    throw InputError(path + ": is " + file_kind(info.st_mode) +
                     ", not a regular file; shardsim reads only regular files");
  }
  size_ = static_cast<std::uint64_t>(info.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string InputFile::read(std::uint64_t offset, std::uint64_t count) const {
  SHARDSIM_ASSERT(offset <= size_ && count <= size_ - offset, "InputFile::read past the size");
  std::string out(count, '\0');
  std::uint64_t done = 0;
  while (done < count) {
    const ssize_t n =
        ::pread(fd_, out.data() + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(path_ + ": cannot read: " + std::strerror(errno));
    if (n == 0) throw InputError(path_ + ": cannot read: the file shrank while it was read");
    done += static_cast<std::uint64_t>(n);
  }
  return out;
}

std::string read_file(const std::string& path, std::uint64_t max_bytes) {
  const InputFile file(path);
  if (file.size() > max_bytes) {
    throw InputError(path + ": is " + std::to_string(file.size()) + " bytes, over the limit of " +
                     std::to_string(max_bytes) + " bytes for this kind of file");
  }
  return file.read(0, file.size());
}

}  // namespace shardsim
