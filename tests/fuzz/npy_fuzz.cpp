// libFuzzer harness for the npy reader (shardsim::decode_npy, the parser behind
// `shardsim compare` and the golden loader): any byte string either decodes into a tensor whose
// byte size matches its dtype and shape, or is rejected with an InputError. Anything else (a
// crash, an abort, a sanitizer report, an uncaught exception, a broken invariant) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "shardsim/error.hpp"
#include "shardsim/golden.hpp"

namespace {

// The RawTensor invariant (golden.hpp): bytes.size() == numel(shape) * dtype size.
void check(const shardsim::RawTensor& t) {
  const auto size = shardsim::format::dtype_info(t.dtype).size;
  if (t.bytes.size() != static_cast<std::size_t>(t.numel()) * size) std::abort();
  (void)shardsim::raw_values(t);  // reads every element
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    check(shardsim::decode_npy(bytes, "fuzz.npy"));
  } catch (const shardsim::InputError&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
