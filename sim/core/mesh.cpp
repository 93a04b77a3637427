#include "shardsim/mesh.hpp"

#include <algorithm>
#include <charconv>
#include <numeric>

#include "shardsim/error.hpp"

namespace shardsim {

std::string_view reduce_order_name(ReduceOrder order) {
  switch (order) {
    case ReduceOrder::rank: return "rank";
    case ReduceOrder::ring: return "ring";
    case ReduceOrder::tree: return "tree";
  }
  return "?";
}

ReduceOrder parse_reduce_order(std::string_view text) {
  if (text == "rank") return ReduceOrder::rank;
  if (text == "ring") return ReduceOrder::ring;
  if (text == "tree") return ReduceOrder::tree;
  throw InputError("unknown reduce order " + quote(std::string(text)) +
                   " (known: rank, ring, tree)");
}

std::string Schedule::str() const {
  switch (kind) {
    case Kind::rank: return "rank";
    case Kind::reverse: return "reverse";
    case Kind::shuffle: return "shuffle:" + std::to_string(seed);
  }
  return "?";
}

Schedule parse_schedule(std::string_view text) {
  if (text == "rank") return {Schedule::Kind::rank, 0};
  if (text == "reverse") return {Schedule::Kind::reverse, 0};
  if (text.substr(0, 8) == "shuffle:") {
    std::uint64_t seed = 0;
    const std::string_view digits = text.substr(8);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seed);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty()) {
      return {Schedule::Kind::shuffle, seed};
    }
  }
  throw InputError("unknown schedule '" + std::string(text) +
                   "' (known: rank, reverse, shuffle:SEED)");
}

std::vector<int> schedule_order(const Schedule& schedule, int ranks) {
  std::vector<int> order(static_cast<std::size_t>(ranks));
  std::iota(order.begin(), order.end(), 0);
  if (schedule.kind == Schedule::Kind::reverse) std::reverse(order.begin(), order.end());
  if (schedule.kind == Schedule::Kind::shuffle) {
    std::uint64_t state = schedule.seed;
    auto splitmix64 = [&state]() {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      return z ^ (z >> 31);
    };
    for (int i = ranks - 1; i > 0; --i) {
      const int j = static_cast<int>(splitmix64() % static_cast<std::uint64_t>(i + 1));
      std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
    }
  }
  return order;
}

}  // namespace shardsim
