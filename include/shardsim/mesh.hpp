// The mesh vocabulary a scenario names without needing the world: how collectives order their
// sums and how local phases visit the ranks.
//
// Reduce orders (the elementwise sum of the ranks' addends x_0..x_{k-1}):
//   rank  ((x_0 + x_1) + x_2) + ... + x_{k-1}
//   ring  the flat buffer of n elements is cut into k chunks (torch.chunk, c = ceil(n/k)); an
//         element of chunk j is summed starting at rank (j+1) mod k and going around the ring,
//         ending at rank j, as in NCCL's ring reduce-scatter.
//   tree  pairwise halving: sum[lo,hi) = sum[lo,mid) + sum[mid,hi), mid = lo + ceil((hi-lo)/2).
// The sum is computed once and copied, so every rank receives bitwise the same result.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim {

enum class ReduceOrder { rank, ring, tree };
std::string_view reduce_order_name(ReduceOrder order);
ReduceOrder parse_reduce_order(std::string_view text);  // throws InputError

struct Schedule {
  enum class Kind { rank, reverse, shuffle };
  Kind kind = Kind::rank;
  std::uint64_t seed = 0;  // shuffle only
  std::string str() const;  // "rank", "reverse", "shuffle:SEED"
};
Schedule parse_schedule(std::string_view text);  // throws InputError
// The order in which local phases visit the ranks. shuffle is Fisher-Yates driven by splitmix64
// from the seed, so it is reproducible.
std::vector<int> schedule_order(const Schedule& schedule, int ranks);

}  // namespace shardsim
