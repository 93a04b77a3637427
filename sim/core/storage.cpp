#include "shardsim/storage.hpp"

#include "shardsim/error.hpp"

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
  // loop is integer arithmetic and a select, which GCC vectorizes (SSE2; the sweep is bound by
  // memory traffic, so an AVX2 copy gains nothing measurable, and a target_clones copy's
  // load-time resolver crashed the ThreadSanitizer build before its runtime started).
  if (format == NarrowFormat::bf16) {
    for (std::int64_t i = 0; i < n; ++i) values[i] = round_to_bf16(values[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) values[i] = round_to_f16(values[i]);
  }
}

}  // namespace shardsim
