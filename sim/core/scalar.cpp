#include "core/scalar.hpp"

#include <bit>
#include <charconv>
#include <cmath>

#include "core/error.hpp"

namespace shardsim {

std::string Precision::name() const {
  switch (kind) {
    case ScalarKind::f32: return "f32";
    case ScalarKind::f64: return "f64";
    case ScalarKind::mp: return "mp" + std::to_string(bits);
    case ScalarKind::bf16: return "bf16";
    case ScalarKind::f16: return "f16";
    case ScalarKind::dd: return "dd";
    case ScalarKind::qd: return "qd";
  }
  return "?";
}

Precision parse_precision(std::string_view text) {
  if (text == "f32") return {ScalarKind::f32, 24};
  if (text == "f64") return {ScalarKind::f64, 53};
  if (text == "bf16") return {ScalarKind::bf16, 8};
  if (text == "f16") return {ScalarKind::f16, 11};
  if (text == "dd") return {ScalarKind::dd, 106};
  if (text == "qd") return {ScalarKind::qd, 212};
  if (text.size() > 2 && text.substr(0, 2) == "mp") {
    std::string_view digits = text.substr(2);
    unsigned bits = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), bits);
    if (ec == std::errc() && end == digits.data() + digits.size() && bits >= kMinMpBits &&
        bits <= kMaxMpBits) {
      return {ScalarKind::mp, bits};
    }
    throw InputError("invalid precision " + quote(std::string(text)) + ": mp<bits> needs " +
                     std::to_string(kMinMpBits) + " <= bits <= " + std::to_string(kMaxMpBits) +
                     " (e.g. mp128, mp256)");
  }
  throw InputError("invalid precision '" + std::string(text) +
                   "': expected bf16, f16, f32, f64, dd, qd or mp<bits> (e.g. mp256)");
}

double default_rtol(const Precision& precision) {
  const int headroom = precision.is_narrow() ? 5 : 16;  // scalar.hpp gives the reasons
  return std::ldexp(1.0, headroom - static_cast<int>(precision.bits));
}

namespace {

// Maps an IEEE bit pattern to an integer that is monotone in the value: negative numbers are
// reflected below zero, so -0 and +0 both map to 0.
template <typename Bits>
std::int64_t ordered(Bits bits, int sign_shift) {
  const Bits sign = Bits{1} << sign_shift;
  if (bits & sign) return -static_cast<std::int64_t>(bits & ~sign);
  return static_cast<std::int64_t>(bits);
}

std::uint64_t distance(std::int64_t a, std::int64_t b) {
  // |a - b| without signed overflow: both fit in 64-bit two's complement with one bit to spare.
  return a > b ? static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b)
               : static_cast<std::uint64_t>(b) - static_cast<std::uint64_t>(a);
}

}  // namespace

std::uint64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return kUlpNaN;
  return distance(ordered(std::bit_cast<std::uint32_t>(a), 31),
                  ordered(std::bit_cast<std::uint32_t>(b), 31));
}

std::uint64_t ulp_distance(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kUlpNaN;
  return distance(ordered(std::bit_cast<std::uint64_t>(a), 63),
                  ordered(std::bit_cast<std::uint64_t>(b), 63));
}

bool ScalarTraits<float>::identical(float a, float b) {
  return !std::isnan(a) && std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

bool ScalarTraits<double>::identical(double a, double b) {
  return !std::isnan(a) && std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

}  // namespace shardsim
