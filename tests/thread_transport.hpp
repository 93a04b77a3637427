// Test support: P "processes" as threads over an in-memory transport (transport.hpp), so that
// the world's and the runner's mpi paths are tested without MPI. Used by transport_test.cpp and
// oracle_root_test.cpp.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/transport.hpp"

namespace shardsim::test {

// P threads exchanging through shared mailboxes, one round at a time.
class Mailboxes {
 public:
  explicit Mailboxes(int processes) : processes_(processes) {}
  std::vector<std::string> exchange(int me, std::uint64_t round, std::vector<std::string> out) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (int p = 0; p < processes_; ++p) box_[{round, me, p}] = out[static_cast<std::size_t>(p)];
    changed_.notify_all();
    std::vector<std::string> in(static_cast<std::size_t>(processes_));
    for (int p = 0; p < processes_; ++p) {
      changed_.wait(lock, [&] { return box_.count({round, p, me}) != 0; });
      in[static_cast<std::size_t>(p)] = box_[{round, p, me}];
    }
    return in;
  }

 private:
  int processes_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::tuple<std::uint64_t, int, int>, std::string> box_;  // (round, from, to)
};

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(Mailboxes& boxes, int me, int processes)
      : boxes_(boxes), me_(me), processes_(processes) {}
  std::string_view name() const override { return "threads"; }
  int process() const override { return me_; }
  int processes() const override { return processes_; }
  std::vector<std::string> exchange(std::vector<std::string> outbox) const override {
    return boxes_.exchange(me_, round_++, std::move(outbox));
  }

 private:
  Mailboxes& boxes_;
  int me_;
  int processes_;
  mutable std::uint64_t round_ = 0;
};

}  // namespace shardsim::test
