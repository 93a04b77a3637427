#include "core/error.hpp"
#include "ops/attention/rope-inl.hpp"

namespace shardsim {

std::string_view rope_convention_name(RopeConvention convention) {
  switch (convention) {
    case RopeConvention::rotate_half:
      return "rotate_half";
    case RopeConvention::interleaved:
      return "interleaved";
  }
  return "?";
}

RopeConvention parse_rope_convention(std::string_view text) {
  if (text == "rotate_half") return RopeConvention::rotate_half;
  if (text == "interleaved") return RopeConvention::interleaved;
  throw InputError("unknown RoPE convention '" + std::string(text) +
                   "' (known: rotate_half, interleaved)");
}

RopePair rope_pair(RopeConvention convention, std::int64_t head_dim, std::int64_t plane) {
  if (convention == RopeConvention::rotate_half) return {plane, plane + head_dim / 2};
  return {2 * plane, 2 * plane + 1};
}

std::vector<std::int64_t> position_range(std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> positions;
  for (std::int64_t i = 0; i < count; ++i) positions.push_back(first + i);
  return positions;
}

SHARDSIM_INSTANTIATE_ROPE(float)
SHARDSIM_INSTANTIATE_ROPE(double)

}  // namespace shardsim
