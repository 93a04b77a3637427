// SHA-256 (FIPS 180-4, section 6.2), for the golden manifest: the scenario text's digest and the
// digest of every golden tensor's bytes. Our own implementation, checked against the NIST example
// vectors ("abc", the empty message, the 448-bit message) in tests/sha256_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardsim {

// Incremental hashing: update() any number of times, then digest() once.
class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  // The 32-byte digest. REQUIRES: called at most once; update() must not follow it.
  std::array<std::uint8_t, 32> digest();

 private:
  void compress(const std::uint8_t* block);  // one 64-byte block

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;         // bytes waiting in buffer_
  std::uint64_t total_bytes_ = 0;    // message length so far
  bool finished_ = false;
};

// The digest of `bytes` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace shardsim
