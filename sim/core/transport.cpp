#include "core/transport.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"

namespace shardsim {

RankBlock rank_block(int process, int processes, int ranks) {
  SHARDSIM_ASSERT(processes >= 1 && processes <= ranks && process >= 0 && process < processes,
                  "rank_block: 1 <= processes <= ranks");
  const int base = ranks / processes;
  const int extra = ranks % processes;
  const int begin = process * base + std::min(process, extra);
  return {begin, begin + base + (process < extra ? 1 : 0)};
}

std::string from_process0(const Transport* transport, std::string message) {
  if (!transport) return message;
  std::vector<std::string> outbox(static_cast<std::size_t>(transport->processes()));
  if (transport->process() == 0) {
    for (std::string& m : outbox) m = message;
  }
  return transport->exchange(std::move(outbox))[0];
}

int rank_owner(int rank, int processes, int ranks) {
  for (int p = 0; p < processes; ++p) {
    if (rank < rank_block(p, processes, ranks).end) return p;
  }
  SHARDSIM_ASSERT(false, "rank_owner: a rank of the mesh");
  return -1;
}

}  // namespace shardsim
