// A forward-only run holds no tensor it will not read again (issue 16): a declared input goes
// after the last step that names it, and a row-wise norm (or gelu) releases its oracle input as
// soon as the oracle has run, before the ranks compute. Evidence is the heap in use (glibc's
// mallinfo2) when a boundary is recorded, against a twin scenario whose later step still reads x:
// the twins hold the same tensors at that boundary except x, so the difference is x's bytes.
#include <malloc.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <string>

#include "shardsim/runner/runner.hpp"
#include "shardsim/scenario/scenario.hpp"

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kHeapCounted = false;  // the sanitizers' allocators do not feed mallinfo2
#else
constexpr bool kHeapCounted = true;
#endif

// x[2, 64, 512] f64: 512 KiB for the oracle's copy, as much again over the four ranks. The
// checks allow 10% either way around whole copies: malloc's chunk headers and thread caches
// move the count by a few KiB, and a copy more or less (a release missing, or one too many) is
// a 100% move.
constexpr double kXBytes = 2.0 * 64 * 512 * 8;

std::string scenario_text(const std::string& steps) {
  return "name = \"release\"\nseed = 5\nprecisions = [\"f64\"]\n[mesh]\nranks = 4\n"
         "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
         "shape = [2, 64, 512]\ninit = { dist = \"normal\", mean = 0.0, std = 1.0 }\n"
         "placement = \"Shard(seq)\"\n"
         "[[steps]]\nop = \"" +
         steps + "\n[expect]\nverdict = \"pass\"\n";
}

// The heap in use when the boundary of `tensor` is recorded (its first time).
class HeapAt final : public shardsim::BoundarySink<double> {
 public:
  explicit HeapAt(std::string tensor) : tensor_(std::move(tensor)) {}
  bool on_boundary(const shardsim::TraceEntry& entry, const shardsim::Tensor<double>*,
                   const shardsim::DistTensor<double>&) override {
    if (entry.tensor != tensor_ || bytes_ >= 0) return true;
    const struct mallinfo2 heap = mallinfo2();  // blocks in use from the heap and from mmap
    bytes_ = static_cast<double>(heap.uordblks) + static_cast<double>(heap.hblkhd);
    return true;
  }
  double bytes() const { return bytes_; }

 private:
  std::string tensor_;
  double bytes_ = -1;
};

double heap_at(const std::string& steps, const std::string& tensor) {
  const shardsim::Scenario scenario = shardsim::parse_scenario(scenario_text(steps), "release");
  HeapAt sink(tensor);
  shardsim::run_scenario<double>(scenario, shardsim::RunOptions{}, sink);
  REQUIRE(sink.bytes() > 0);
  return sink.bytes();
}

const char* const kNorm = "layer_norm\"\ninput = \"x\"\noutput = \"y\"\naxis = \"hidden\"\n";
const char* const kRmsNorm = "rms_norm\"\ninput = \"x\"\noutput = \"y\"\naxis = \"hidden\"\n";
const char* const kGeluX = "gelu\"\ninput = \"x\"\noutput = \"y\"\n";
const char* const kGelu = "[[steps]]\nop = \"gelu\"\ninput = \"y\"\noutput = \"a\"\n";
const char* const kAddX =
    "[[steps]]\nop = \"add\"\ninput = \"a\"\nresidual = \"x\"\noutput = \"z\"\n";

}  // namespace

TEST_CASE("a forward-only norm or gelu releases its oracle input before the ranks compute",
          "[memory][release]") {
  if (!kHeapCounted) return;  // mallinfo2 does not count a sanitizer's heap
  // At the ranks' y boundary: alone, x's oracle copy is gone; with a later add reading x it
  // stays. Both hold the ranks' x, the oracle's y and the ranks' y.
  for (const char* norm : {kNorm, kRmsNorm, kGeluX}) {
    INFO(norm);
    const double alone = heap_at(norm, "y");
    const double kept = heap_at(std::string(norm) + kGelu + kAddX, "y");
    CHECK(kept - alone > 0.9 * kXBytes);
    CHECK(kept - alone < 1.1 * kXBytes);
  }
}

TEST_CASE("a forward-only run releases a declared input after the last step that names it",
          "[memory][release]") {
  if (!kHeapCounted) return;  // mallinfo2 does not count a sanitizer's heap
  // At gelu's boundary `a`: x (the oracle's and the ranks' copies) went after the LayerNorm
  // unless the add still reads it. y, a and their rank copies are in both.
  const double gone = heap_at(std::string(kNorm) + kGelu, "a");
  const double kept = heap_at(std::string(kNorm) + kGelu + kAddX, "a");
  CHECK(kept - gone > 1.8 * kXBytes);
  CHECK(kept - gone < 2.2 * kXBytes);
}
