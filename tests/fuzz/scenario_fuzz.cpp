// libFuzzer harness for the scenario loader: any byte string either loads or is rejected with
// an InputError. Anything else (a crash, an abort, a sanitizer report, an uncaught exception)
// is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "scenario/scenario.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    shardsim::parse_scenario(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml");
  } catch (const shardsim::InputError&) {
    // Rejected with a located message: the expected outcome for most inputs.
  }
  return 0;
}
