#include "core/storage.hpp"

#include "core/error.hpp"
#include "core/lane_sums.hpp"

namespace shardsim {

std::string_view accumulate_name(Accumulate accumulate) {
  switch (accumulate) {
    case Accumulate::f32:
      return "f32";
    case Accumulate::storage:
      return "storage";
  }
  return "?";
}

std::optional<Accumulate> parse_accumulate(std::string_view text) {
  if (text == "f32") return Accumulate::f32;
  if (text == "storage") return Accumulate::storage;
  return std::nullopt;
}

NarrowFormat narrow_format(const Precision& precision) {
  SHARDSIM_ASSERT(precision.is_narrow(), "narrow_format of a wide precision");
  return precision.kind == ScalarKind::bf16 ? NarrowFormat::bf16 : NarrowFormat::f16;
}

const char* narrow_name(NarrowFormat format) {
  return format == NarrowFormat::bf16 ? "bf16" : "f16";
}

void round_to_narrow(NarrowFormat format, float* values, std::int64_t n) {
  // One loop per format, so that each inlines its rounding without a per-element branch. The bf16
  // loop is integer arithmetic and a select, which GCC vectorizes; it runs with the lane kernels'
  // instruction set (run_lanes, lane_isa.hpp: AVX2 where the CPU has it, which doubles the width).
  // A sweep over a whole tensor is bound by memory traffic either way, but the LayerNorm kernels
  // call it on a row they have just written, still in cache (LayerNormParams::store: f16, strided
  // rows, the tails of the lane passes), where the arithmetic is the cost. Integer operations give
  // the same bits in every copy; the f16 loop's one float operation pair (subnormals) is IEEE
  // single arithmetic, also the same in both. (A target_clones copy's load-time resolver crashed
  // the ThreadSanitizer build before its runtime started; run_lanes dispatches at the call
  // instead.)
  if (format == NarrowFormat::bf16) {
    detail::run_lanes([&] {
      for (std::int64_t i = 0; i < n; ++i) values[i] = round_to_bf16(values[i]);
    });
  } else {
    detail::run_lanes([&] {
      for (std::int64_t i = 0; i < n; ++i) values[i] = round_to_f16(values[i]);
    });
  }
}

}  // namespace shardsim
