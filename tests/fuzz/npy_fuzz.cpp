// libFuzzer harness for the npy reader (shardsim::decode_npy, the parser behind
// `shardsim compare` and the golden loader): any byte string either decodes into a tensor whose
// byte size matches its dtype and shape, or is rejected with an InputError. Anything else (a
// crash, an abort, a sanitizer report, an uncaught exception, a broken invariant) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "raw_tensor_check.hpp"
#include "core/error.hpp"
#include "io/tensor_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    fuzz::check(shardsim::decode_npy(bytes, "fuzz.npy"));
  } catch (const shardsim::InputError&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
