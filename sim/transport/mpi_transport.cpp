#include "transport/mpi_transport.hpp"

#include <mpi.h>

#include <boost/mpi/environment.hpp>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace shardsim {

namespace {

std::unique_ptr<boost::mpi::environment>& environment() {
  static std::unique_ptr<boost::mpi::environment> env;
  return env;
}

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw TransportError(std::string(what) + ": " +
                       std::string(text, static_cast<std::size_t>(length)));
}

// The job's processes on this machine, as the launcher tells them (Open MPI, MPICH), without a
// collective call (a process that fails before it would leave the others waiting); 0 if unknown.
unsigned local_processes() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* text = std::getenv(name)) return static_cast<unsigned>(std::atoi(text));
  }
  return 0;
}

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(double timeout) : timeout_(timeout) {
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &process_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &processes_), "MPI_Comm_size");
    read_test_fault();
    spin_ = local_processes() > std::thread::hardware_concurrency()
                ? std::chrono::microseconds(0)
                : std::chrono::microseconds(5000);
  }
  std::string_view name() const override { return "mpi"; }
  int process() const override { return process_; }
  int processes() const override { return processes_; }
  std::vector<std::string> exchange(std::vector<std::string> outbox) const override;

 private:
  double timeout_;
  // How long an exchange only yields between polls before it sleeps (exchange): 5 ms, or none
  // when this machine runs more of the job's processes than it has cores, where a yielding
  // process would take the core from the one it waits for.
  std::chrono::microseconds spin_{0};
  int process_ = 0;
  int processes_ = 1;
  mutable std::uint64_t round_ = 0;  // every process counts its exchanges alike
  // The fault tests' hook (tests/mpi/mpi_faults.sh): SHARDSIM_MPI_TEST_FAULT=P:N:KILL|STOP makes
  // process P send itself SIGKILL (a crash) or SIGSTOP (a hang) on entering exchange #N.
  void read_test_fault();
  // The error of an exchange that heard nothing for timeout_ s from the processes still pending.
  TransportError silence(const std::vector<bool>& pending) const;
  int fault_process_ = -1;
  std::uint64_t fault_round_ = 0;
  int fault_signal_ = 0;
};

void MpiTransport::read_test_fault() {
  const char* text = std::getenv("SHARDSIM_MPI_TEST_FAULT");
  if (!text) return;
  unsigned long long at = 0;
  char what[8] = {};
  if (std::sscanf(text, "%d:%llu:%7s", &fault_process_, &at, what) != 3) {
    throw TransportError(std::string("SHARDSIM_MPI_TEST_FAULT: expected P:N:KILL|STOP, got ") +
                         text);
  }
  fault_round_ = at;
  fault_signal_ = std::string(what) == "STOP" ? SIGSTOP : SIGKILL;
}

TransportError MpiTransport::silence(const std::vector<bool>& pending) const {
  std::string silent;
  for (int p = 0; p < processes_; ++p) {
    if (pending[static_cast<std::size_t>(p)])
      silent += (silent.empty() ? "" : ",") + std::to_string(p);
  }
  return TransportError("process " + std::to_string(process_) + ": no message from process" +
                        (silent.empty() ? "es (sends not delivered)" : "es " + silent) + " for " +
                        std::to_string(static_cast<int>(timeout_)) + " s at exchange #" +
                        std::to_string(round_ - 1) +
                        ": a process died or hung (see --peer-timeout)");
}

std::vector<std::string> MpiTransport::exchange(std::vector<std::string> outbox) const {
  using Clock = std::chrono::steady_clock;
  // Exchanges are matched by order (MPI keeps it per sender and tag); the tag only separates
  // consecutive rounds.
  if (process_ == fault_process_ && round_ == fault_round_) std::raise(fault_signal_);
  const int tag = static_cast<int>(round_++ % 32000);
  std::vector<MPI_Request> sends;
  for (int p = 0; p < processes_; ++p) {
    if (p == process_) continue;
    std::string& message = outbox[static_cast<std::size_t>(p)];
    if (message.size() > static_cast<std::size_t>(INT_MAX)) {
      throw TransportError("a message of " + std::to_string(message.size()) +
                           " bytes, over MPI's 2 GiB per message (run with more processes)");
    }
    sends.emplace_back();
    check(MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_BYTE, p, tag,
                    MPI_COMM_WORLD, &sends.back()),
          "MPI_Isend");
  }
  std::vector<std::string> inbox(static_cast<std::size_t>(processes_));
  std::vector<bool> pending(static_cast<std::size_t>(processes_), true);
  pending[static_cast<std::size_t>(process_)] = false;
  int waiting = processes_ - 1;
  // Polling: for the first spin_ after the last progress only yield the core between polls, then
  // sleep, backing off to 2 ms. A sleeping process makes no MPI progress, and a message larger
  // than the eager limit needs both sides to progress (rendezvous): sleeping from the first poll
  // made each exchange cost several timer wake-ups on each side (about 1.2 s of sleeps in a
  // 0.1 s bundled scenario under -np 2).
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_);
  auto spin_until = Clock::now() + spin_;
  auto pause = std::chrono::microseconds(0);
  while (true) {
    bool progress = false;
    for (int p = 0; p < processes_; ++p) {
      if (!pending[static_cast<std::size_t>(p)]) continue;
      int arrived = 0;
      MPI_Status status;
      check(MPI_Iprobe(p, tag, MPI_COMM_WORLD, &arrived, &status), "MPI_Iprobe");
      if (!arrived) continue;
      int count = 0;
      check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
      std::string& message = inbox[static_cast<std::size_t>(p)];
      message.resize(static_cast<std::size_t>(count));
      check(MPI_Recv(message.data(), count, MPI_BYTE, p, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "MPI_Recv");
      pending[static_cast<std::size_t>(p)] = false;
      --waiting;
      progress = true;
    }
    int sent = 0;
    check(MPI_Testall(static_cast<int>(sends.size()), sends.data(), &sent, MPI_STATUSES_IGNORE),
          "MPI_Testall");
    if (sent && waiting == 0) break;
    if (progress) {
      deadline = Clock::now() + std::chrono::duration<double>(timeout_);
      spin_until = Clock::now() + spin_;
      pause = std::chrono::microseconds(0);
      continue;
    }
    if (Clock::now() > deadline) throw silence(pending);
    if (Clock::now() < spin_until) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2 + std::chrono::microseconds(20), std::chrono::microseconds(2000));
  }
  inbox[static_cast<std::size_t>(process_)] = std::move(outbox[static_cast<std::size_t>(process_)]);
  return inbox;
}

}  // namespace

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

std::shared_ptr<const Transport> make_mpi_transport(double timeout_seconds) {
  if (!environment()) {
    // Threads (--threads) run local phases only; MPI is called from the main thread.
    environment() = std::make_unique<boost::mpi::environment>(boost::mpi::threading::funneled);
  }
  return std::make_shared<MpiTransport>(timeout_seconds);
}

std::string mpi_process_prefix() {
  int started = 0;
  int finished = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&finished);
  if (!started || finished) return "";
  int process = 0;
  int processes = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &process);
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  return processes > 1 ? "process " + std::to_string(process) + ": " : "";
}

void abort_mpi_job(int code) {
  int started = 0;
  MPI_Initialized(&started);
  if (started) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace shardsim
