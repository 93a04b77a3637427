#include "cli/transport_options.hpp"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "report/report.hpp"
#include "transport/mpi_transport.hpp"

namespace po = boost::program_options;

namespace shardsim::cli {

void add_transport_options(po::options_description& options) {
  options.add_options()(
      "transport", po::value<std::string>(),
      "local: one process emulates every rank (the default without mpirun); mpi: the ranks are "
      "spread over the processes mpirun started, in contiguous blocks (the default under mpirun)")(
      "peer-timeout", po::value<double>(),
      "mpi: seconds an exchange waits for a silent peer before the job is aborted, exit 4 "
      "(default 20)")(
      "oracle", po::value<std::string>(),
      "root: the dense oracle on process 0 (the default); distributed: every process computes "
      "the oracle on its block of batch rows, where no sum changes order (docs/mpi.md)");
}

bool distributed_oracle_option(const po::variables_map& vm) {
  if (!vm.count("oracle")) return false;
  const std::string kind = vm["oracle"].as<std::string>();
  if (kind != "root" && kind != "distributed") {
    throw InputError("--oracle: expected root or distributed, got " + quote(kind));
  }
  return kind == "distributed";
}

void check_oracle_option(const RunOptions& run, const Scenario& scenario, bool golden) {
  if (!run.distributed_oracle) return;
  if (golden) {
    throw InputError(
        "--oracle distributed does not write goldens: a golden is a global tensor, "
        "which the oracle's row blocks never assemble; use --oracle root");
  }
  check_distributed_oracle(scenario, run.transport ? run.transport->processes() : 1);
}

std::string with_transport_field(const std::string& json, const Transport& transport,
                                 const Scenario& scenario, const RunOptions& run) {
  std::optional<std::int64_t> rows;
  if (run.distributed_oracle) rows = oracle_rows_extent(scenario);
  return shardsim::with_transport_field(json, transport, scenario.mesh.ranks(), rows);
}

std::shared_ptr<const Transport> transport_option(const po::variables_map& vm) {
  const bool launched = launched_by_mpirun();
  std::string kind = launched ? "mpi" : "local";
  if (vm.count("transport")) kind = vm["transport"].as<std::string>();
  if (kind != "local" && kind != "mpi") {
    throw InputError("--transport: expected local or mpi, got " + quote(kind));
  }
  double timeout = 20;
  if (vm.count("peer-timeout")) {
    timeout = vm["peer-timeout"].as<double>();
    if (!(timeout > 0 && timeout <= 86400)) {
      throw InputError("--peer-timeout: expected seconds in (0, 86400], got " +
                       std::to_string(timeout));
    }
    if (kind != "mpi") throw InputError("--peer-timeout needs --transport mpi");
  }
  if (kind == "local") {
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (size && std::string(size) != "1") {
      throw InputError(std::string("--transport local under mpirun with ") + size +
                       " processes: each would run the whole scenario and write the same "
                       "outputs; use --transport mpi (the default under mpirun) or -np 1");
    }
    return nullptr;
  }
  return make_mpi_transport(timeout);
}

}  // namespace shardsim::cli

namespace shardsim::cli {

int exit_code_of_process0(const Transport* transport, int code) {
  if (!transport) return code;
  const std::string root = from_process0(transport, std::to_string(code));
  if (root.size() != 1 || root[0] < '0' || root[0] > '9') {
    throw TransportError("process 0 sent no exit code");
  }
  return root[0] - '0';
}

}  // namespace shardsim::cli
