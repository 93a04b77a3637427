// Private to the golden codecs: little-endian helpers, located rejection, and the bytes a decoder
// reads, from memory or from a file. A decoder asks for the header first and checks every
// declared length against size() before it asks for the data, so a file larger (or smaller) than
// its header declares is refused before its data is read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/io.hpp"

namespace shardsim::golden_detail {

inline std::uint64_t load_le(const char* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i)
    v |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

inline void store_le(std::string& out, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

[[noreturn]] inline void reject(const std::string& what, const std::string& message) {
  throw InputError(what + ": " + message);
}

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual std::uint64_t size() const = 0;
  // REQUIRES: offset + count <= size().
  virtual std::string read(std::uint64_t offset, std::uint64_t count) const = 0;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string_view bytes) : bytes_(bytes) {}
  std::uint64_t size() const override { return bytes_.size(); }
  std::string read(std::uint64_t offset, std::uint64_t count) const override {
    return std::string(bytes_.substr(offset, count));
  }

 private:
  std::string_view bytes_;
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : file_(path) {}
  std::uint64_t size() const override { return file_.size(); }
  std::string read(std::uint64_t offset, std::uint64_t count) const override {
    return file_.read(offset, count);
  }

 private:
  InputFile file_;
};

}  // namespace shardsim::golden_detail
