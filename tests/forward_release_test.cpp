// A forward-only run holds no tensor it will not read again (issue 16): a declared input goes
// after the last step that names it, and a row-wise norm (or gelu) whose input no later step
// reads computes its output in the input's own storage, the oracle's and every rank's, so x and
// y are never both held. Evidence is the heap in use (glibc's mallinfo2) when a boundary is
// recorded, against a twin scenario whose later step still reads x: the twins hold the same
// tensors at that boundary except x, so the difference is x's bytes.
#include <malloc.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runner/runner.hpp"
#include "scenario/scenario.hpp"

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

// The heap in use when the boundary of `tensor` is recorded (its first time), and, when asked,
// the values there: the oracle's, then every rank's.
class HeapAt final : public shardsim::BoundarySink<double> {
 public:
  HeapAt(std::string tensor, bool keep_values)
      : tensor_(std::move(tensor)), keep_values_(keep_values) {}
  bool on_boundary(const shardsim::TraceEntry& entry, const shardsim::Tensor<double>* dense,
                   const shardsim::DistTensor<double>& sharded) override {
    if (entry.tensor != tensor_ || bytes_ >= 0) return true;
    const struct mallinfo2 heap = mallinfo2();  // blocks in use from the heap and from mmap
    bytes_ = static_cast<double>(heap.uordblks) + static_cast<double>(heap.hblkhd);
    if (!keep_values_) return true;
    if (dense) values_ = dense->values();
    for (const shardsim::Tensor<double>& local : sharded.locals) {
      values_.insert(values_.end(), local.values().begin(), local.values().end());
    }
    return true;
  }
  double bytes() const { return bytes_; }
  const std::vector<double>& values() const { return values_; }

 private:
  std::string tensor_;
  bool keep_values_;
  double bytes_ = -1;
  std::vector<double> values_;
};

struct HeapAndValues {
  double bytes = 0;
  std::vector<double> values;
};

HeapAndValues heap_at(const std::string& steps, const std::string& tensor,
                      bool keep_values = false) {
  const shardsim::Scenario scenario = shardsim::parse_scenario(scenario_text(steps), "release");
  HeapAt sink(tensor, keep_values);
  shardsim::run_scenario<double>(scenario, shardsim::RunOptions{}, sink);
  REQUIRE(sink.bytes() >= 0);  // the boundary was recorded
  return {sink.bytes(), sink.values()};
}

// Bitwise equality of two runs' values (the sign of a zero included).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<std::uint64_t>(a[i]) != std::bit_cast<std::uint64_t>(b[i])) return false;
  }
  return true;
}

const char* const kNorm = "layer_norm\"\ninput = \"x\"\noutput = \"y\"\naxis = \"hidden\"\n";
const char* const kRmsNorm = "rms_norm\"\ninput = \"x\"\noutput = \"y\"\naxis = \"hidden\"\n";
const char* const kGeluX = "gelu\"\ninput = \"x\"\noutput = \"y\"\n";
const char* const kGelu = "[[steps]]\nop = \"gelu\"\ninput = \"y\"\noutput = \"a\"\n";
const char* const kAddX =
    "[[steps]]\nop = \"add\"\ninput = \"a\"\nresidual = \"x\"\noutput = \"z\"\n";

}  // namespace

TEST_CASE("a forward-only norm or gelu computes in its spent input's storage",
          "[memory][release]") {
  // At the ranks' y boundary: alone, the oracle's y and the ranks' y sit in x's storage (two
  // copies in all); with a later add reading x, the oracle's x and the ranks' x stay beside them
  // (four). The difference is two copies of x. (Before the outputs took the inputs' storage it
  // was one: the oracle's x went, the ranks' x stayed beside their y.)
  for (const char* norm : {kNorm, kRmsNorm, kGeluX}) {
    INFO(norm);
    const std::string twin = std::string(norm) + kGelu + kAddX;
    {
      // In place or not, the same values: the oracle's y and every rank's, bit for bit (the
      // oracle comparison alone would not show a kernel that went wrong in place on both sides).
      const std::vector<double> in_place = heap_at(norm, "y", true).values;
      CHECK(in_place.size() == 2 * 2 * 64 * 512);
      CHECK(same_bits(in_place, heap_at(twin, "y", true).values));
    }
    if (!kHeapCounted) continue;  // mallinfo2 does not count a sanitizer's heap
    // Measured with no values held from another run.
    const double alone = heap_at(norm, "y").bytes;
    const double kept = heap_at(twin, "y").bytes;
    CHECK(kept - alone > 1.9 * kXBytes);
    CHECK(kept - alone < 2.1 * kXBytes);
  }
}

TEST_CASE("a forward-only run releases a declared input after the last step that names it",
          "[memory][release]") {
  if (!kHeapCounted) return;  // mallinfo2 does not count a sanitizer's heap
  // At gelu's boundary `a`: x (the oracle's and the ranks' copies) went after the LayerNorm
  // unless the add still reads it. y, a and their rank copies are in both.
  const double gone = heap_at(std::string(kNorm) + kGelu, "a").bytes;
  const double kept = heap_at(std::string(kNorm) + kGelu + kAddX, "a").bytes;
  CHECK(kept - gone > 1.8 * kXBytes);
  CHECK(kept - gone < 2.2 * kXBytes);
}
