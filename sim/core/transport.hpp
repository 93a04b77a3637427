// The transport under the world: how the processes of one run exchange bytes.
//
// `local` (no Transport object): one process emulates every rank, today's world. `mpi`
// (sim/transport/, linked into the CLI only): P processes, started by mpirun, each running the
// same control flow; process p holds a contiguous block of the mesh's ranks (rank_block below) and
// the world moves data between processes only inside its collectives, ring hops and boundary
// gathers (world.hpp), through exchange().
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim {

// A peer process is gone or silent past the transport's timeout: the run cannot finish.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;  // "mpi"
  virtual int process() const = 0;            // this process, 0 <= process() < processes()
  virtual int processes() const = 0;
  // A symmetric exchange: every process calls it at the same point of the run with one message
  // per process (outbox[p] goes to process p; its own entry comes back unchanged) and gets back
  // inbox[p], what process p sent it. Messages may be empty. Throws TransportError when a peer
  // does not answer within the transport's timeout (a dead or hung process).
  virtual std::vector<std::string> exchange(std::vector<std::string> outbox) const = 0;
};

// Process 0's `message`, on every process (each passes its own; only process 0's is read). Every
// process must call it at the same point. Without a transport (local) it returns `message`.
std::string from_process0(const Transport* transport, std::string message);

// The ranks process p holds: [begin, end). Contiguous blocks in rank order, balanced as
// torch.tensor_split: the first (ranks mod P) processes hold one rank more. 8 ranks over 3
// processes: 0-2, 3-5, 6-7. REQUIRES: 1 <= processes <= ranks.
struct RankBlock {
  int begin = 0;
  int end = 0;
};
RankBlock rank_block(int process, int processes, int ranks);
int rank_owner(int rank, int processes, int ranks);

}  // namespace shardsim
