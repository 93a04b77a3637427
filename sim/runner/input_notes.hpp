// The note an input boundary carries when a run rounds the scenario's values. Private to the
// runner (runner-inl.hpp).
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/narrow.hpp"
#include "core/rng.hpp"
#include "core/scalar.hpp"
#include "scenario/scenario.hpp"
#include "core/tensor.hpp"

namespace shardsim::detail {

// An f32 run of F64 file values rounds each once, to nearest (float(double)); a narrow run rounds
// every input value once to its format (a file's double directly, never through float). The note
// on the input boundary says how many moved and how far. f64 and mp runs hold file values
// exactly: no note.
// `stored(i)` is the stored value at global flat index i (the global tensor's element, or the value
// drawn again on a process that never builds the global tensor); numel values.
template <typename T, typename Stored>
std::vector<std::string> input_rounding_notes(const TensorSpec& spec, std::int64_t numel,
                                              const Stored& stored,
                                              std::optional<NarrowFormat> storage) {
  if constexpr (std::is_same_v<T, double> || !std::is_arithmetic_v<T>) {
    if (!storage) return {};
  }
  const bool from_file = spec.init.dist == InitDist::file;
  if (!storage && !from_file) return {};
  std::int64_t rounded = 0;
  std::int64_t overflowed = 0;
  double max_rel = 0;
  for (std::int64_t i = 0; i < numel; ++i) {
    const auto index = static_cast<std::uint64_t>(i);
    const double v =
        from_file ? (*spec.init.values)[index] : init_value(spec.init, spec.init_seed, index);
    const double r = ScalarTraits<T>::to_double(stored(i));
    if (r == v || (std::isnan(r) && std::isnan(v))) continue;
    ++rounded;
    if (std::isinf(r)) {
      ++overflowed;
    } else {
      max_rel = std::max(max_rel, std::fabs(r - v) / std::fabs(v));
    }
  }
  if (rounded == 0) return {};
  char rel[32];
  std::snprintf(rel, sizeof rel, "%.2g", max_rel);
  const std::string count = std::to_string(rounded) + " of " + std::to_string(numel);
  const std::string format = storage ? narrow_name(*storage) : "f32";
  const std::string source =
      from_file ? " " + spec.init.file_dtype + " values from '" + spec.init.file + "'"
                : " drawn (f32) values";
  return {format + " run: " + count + source + " rounded once to nearest " + format +
          " (max relative change " + rel + ")" +
          (overflowed ? ", " + std::to_string(overflowed) + " overflowed to inf" : "")};
}

}  // namespace shardsim::detail
