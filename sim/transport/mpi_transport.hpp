// The mpi transport (transport.hpp) over Boost.MPI / Open MPI. Linked into the CLI only, so the
// library, its tests and the fuzz harnesses do not need MPI.
#pragma once

#include <memory>
#include <string>

#include "core/transport.hpp"

namespace shardsim {

// Whether this process was started by mpirun (Open MPI's or a PMI launcher's environment).
bool launched_by_mpirun();

// Initializes MPI once (finalized at exit) and returns the transport over MPI_COMM_WORLD, with
// errors returned rather than fatal. An exchange waits at most `timeout_seconds` for silence from
// a peer (any message resets the clock) before it throws TransportError.
std::shared_ptr<const Transport> make_mpi_transport(double timeout_seconds);

// "process P: " once MPI has started with more than one process, else "".
std::string mpi_process_prefix();

// After a TransportError: ends every process of the job (MPI_Abort), since a peer that is gone
// would make MPI_Finalize wait forever. Does nothing when MPI was not started.
[[noreturn]] void abort_mpi_job(int code);

}  // namespace shardsim
