// `run`'s transport options (docs/mpi.md).
#pragma once

#include <boost/program_options.hpp>
#include <memory>
#include <string>

#include "runner/runner.hpp"
#include "scenario/scenario.hpp"
#include "core/transport.hpp"

namespace shardsim::cli {

// --transport local|mpi (default: mpi under mpirun, else local) and --peer-timeout SECONDS.
void add_transport_options(boost::program_options::options_description& options);
// The transport the options ask for: null for local; for mpi, MPI started and this process's
// transport. Throws InputError for a bad value, --peer-timeout without mpi, and --transport local
// under mpirun with more than one process.
std::shared_ptr<const Transport> transport_option(const boost::program_options::variables_map& vm);
// --oracle root|distributed (default root): whether the oracle runs in row blocks over the
// processes (RunOptions::distributed_oracle). Throws InputError for another value.
bool distributed_oracle_option(const boost::program_options::variables_map& vm);
// With --oracle distributed: throws InputError when the scenario cannot run with it
// (check_distributed_oracle over the run's processes) or goldens are asked for.
void check_oracle_option(const RunOptions& run, const Scenario& scenario, bool golden);
// The report with the mpi transport's "transport" key (report.hpp), naming the oracle's rows
// under --oracle distributed. REQUIRES: run.transport.
std::string with_transport_field(const std::string& json, const Transport& transport,
                                 const Scenario& scenario, const RunOptions& run);
// Process 0's exit code `code` on every process (the oracle and the verdict live there); every
// process must call it at the same point. Without a transport: `code`.
int exit_code_of_process0(const Transport* transport, int code);

}  // namespace shardsim::cli
