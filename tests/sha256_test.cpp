// SHA-256 against the NIST example vectors (FIPS 180-4 examples, "SHA256.pdf" in NIST's
// "Cryptographic Standards and Guidelines: Examples with Intermediate Values") and against
// itself under every way of splitting the input.
#include <catch2/catch.hpp>
#include <string>

#include "core/sha256.hpp"

using shardsim::Sha256;
using shardsim::sha256_hex;

TEST_CASE("sha256: NIST example vectors", "[sha256]") {
  // One-block message "abc" (24 bits).
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // The empty message (0 bits): padding alone fills one block.
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // The two-block 448-bit message: 56 bytes leave no room for the length, so the padding spills
  // into a second block.
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // The 896-bit message of FIPS 180-2 appendix C / the NIST examples.
  CHECK(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                   "klmnopqrlmnopqrsmnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  // One million 'a' (FIPS 180-2 appendix B.3): many full blocks through update().
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256: incremental updates give the one-shot digest at every split", "[sha256]") {
  std::string message;
  for (int i = 0; i < 200; ++i) message += static_cast<char>(i * 37 + 11);
  const std::string expected = sha256_hex(message);
  // Lengths 55, 56, 63, 64, 65 are the padding edge cases; splits cover partial buffers.
  for (std::size_t split = 0; split <= message.size(); split += 7) {
    Sha256 hash;
    hash.update(std::string_view(message).substr(0, split));
    hash.update(std::string_view(message).substr(split));
    std::string hex;
    for (std::uint8_t byte : hash.digest()) {
      static constexpr char kHex[] = "0123456789abcdef";
      hex += kHex[byte >> 4];
      hex += kHex[byte & 15];
    }
    INFO("split at " << split);
    CHECK(hex == expected);
  }
}

TEST_CASE("sha256: messages at the padding edges", "[sha256]") {
  // 55 bytes leave exactly room for 0x80 and the length; 56..63 push the length into a second
  // block; 64 is one full block plus a padding block. Expected digests from Python's hashlib
  // (OpenSSL), an independent implementation: hashlib.sha256(b'x' * n).hexdigest().
  CHECK(sha256_hex(std::string(55, 'x')) ==
        "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  CHECK(sha256_hex(std::string(56, 'x')) ==
        "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  CHECK(sha256_hex(std::string(63, 'x')) ==
        "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2");
  CHECK(sha256_hex(std::string(64, 'x')) ==
        "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
  CHECK(sha256_hex(std::string(65, 'x')) ==
        "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9");
}
