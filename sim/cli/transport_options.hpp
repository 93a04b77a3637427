// `run`'s transport options (README "Many processes: the mpi transport").
#pragma once

#include <boost/program_options.hpp>
#include <memory>

#include "shardsim/transport.hpp"

namespace shardsim::cli {

// --transport local|mpi (default: mpi under mpirun, else local) and --peer-timeout SECONDS.
void add_transport_options(boost::program_options::options_description& options);
// The transport the options ask for: null for local; for mpi, MPI started and this process's
// transport. Throws InputError for a bad value, --peer-timeout without mpi, and --transport local
// under mpirun with more than one process.
std::shared_ptr<const Transport> transport_option(const boost::program_options::variables_map& vm);
// Process 0's exit code `code` on every process (the oracle and the verdict live there); every
// process must call it at the same point. Without a transport: `code`.
int exit_code_of_process0(const Transport* transport, int code);

}  // namespace shardsim::cli
