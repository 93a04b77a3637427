// The pool behind parallel_for (parallel.hpp): thread_count() - 1 persistent workers plus the
// calling thread claim blocks of indices from one atomic counter. One top-level job runs at a
// time. A parallel_for called from inside a job (a rank's kernel inside the loop over ranks) is a
// nested job: when some thread is idle (its share of the outer job done) it is published, and
// idle threads claim its indices beside the thread that called it; otherwise it runs serially on
// its thread. Either way every index runs exactly once and computes the same thing, so results
// do not depend on which thread runs what.
#include "core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/mp.hpp"
#include "core/narrow_float.hpp"

namespace shardsim {

namespace {

thread_local bool t_inside_parallel_for = false;

struct Job {
  const std::int64_t n;
  // About eight blocks per thread: few atomic claims, and still balanced when indices differ in
  // cost (causal attention rows). The partition never changes what an index computes.
  const std::int64_t block;
  const std::function<void(std::int64_t)>* const body;
  const long mp_bits;          // the caller's mp_thread_bits()
  const NarrowFormat narrow;   // the caller's narrow_float_format()
  std::atomic<std::int64_t> next{0};
  std::mutex error_mutex;
  std::int64_t first_error = -1;  // the smallest failing index, -1 while none failed
  std::exception_ptr error;
  int helpers = 0;  // threads other than the caller inside work() (guarded by the pool's mutex)

  Job(std::int64_t count, const std::function<void(std::int64_t)>& f, int threads)
      : n(count),
        block(std::max<std::int64_t>(1, count / (8 * static_cast<std::int64_t>(threads)))),
        body(&f),
        mp_bits(mp_thread_bits()),
        narrow(narrow_float_format()) {}

  bool unclaimed() const { return next.load(std::memory_order_relaxed) < n; }

  // Claims blocks until none is left. Every index runs, even after a failure, so which error is
  // rethrown (the smallest index's) does not depend on timing. The thread's mp precision, narrow
  // format and nesting flag are the caller's while it works here, and its own again after.
  void work() {
    const long saved_bits = mp_thread_bits();
    const NarrowFormat saved_narrow = narrow_float_format();
    const bool saved_inside = t_inside_parallel_for;
    if (saved_bits != mp_bits) set_mp_thread_bits(mp_bits);
    set_narrow_float_format(narrow);
    t_inside_parallel_for = true;
    for (;;) {
      const std::int64_t begin = next.fetch_add(block);
      if (begin >= n) break;
      const std::int64_t end = std::min(n, begin + block);
      for (std::int64_t i = begin; i < end; ++i) {
        try {
          (*body)(i);
        } catch (...) {
          const std::lock_guard lock(error_mutex);
          if (first_error < 0 || i < first_error) {
            first_error = i;
            error = std::current_exception();
          }
        }
      }
    }
    t_inside_parallel_for = saved_inside;
    set_narrow_float_format(saved_narrow);
    if (saved_bits != mp_bits) set_mp_thread_bits(saved_bits);
  }
};

class Pool {
 public:
  ~Pool() { resize(0); }

  // REQUIRES: no job running (the submit mutex is held or no job was ever started).
  void resize(int workers) {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(); });
  }
  int workers() const { return static_cast<int>(threads_.size()); }

  // A top-level job: the caller works on it, then helps the nested jobs the workers' indices
  // open until every worker has left it.
  void run(Job& job) {
    {
      const std::lock_guard lock(mutex_);
      job_ = &job;
      ++generation_;
    }
    changed_.notify_all();
    job.work();
    std::unique_lock lock(mutex_);
    job_ = nullptr;  // a worker waking from now on finds nothing to join
    while (active_ != 0) {
      if (Job* open = open_job()) {
        help(lock, *open);
      } else {
        wait(lock);
      }
    }
  }

  // Whether some thread waits for work; a nested job is worth publishing only then.
  bool has_idle() const { return idle_.load(std::memory_order_relaxed) > 0; }

  // A nested job: published for idle threads, worked by the caller, and returned from once no
  // helper is inside it. The caller does not take other work while it waits (its own job's
  // helpers are all it waits for, so no thread ever waits on a thread that waits on it).
  void run_nested(Job& job) {
    {
      const std::lock_guard lock(mutex_);
      open_.push_back(&job);
    }
    changed_.notify_all();
    job.work();
    std::unique_lock lock(mutex_);
    open_.erase(std::find(open_.begin(), open_.end(), &job));
    changed_.wait(lock, [&] { return job.helpers == 0; });
  }

 private:
  void loop() {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      if (stop_) return;
      if (job_ != nullptr && generation_ != seen) {
        seen = generation_;
        Job* job = job_;
        ++active_;
        lock.unlock();
        job->work();
        lock.lock();
        --active_;
        changed_.notify_all();
      } else if (Job* open = open_job()) {
        help(lock, *open);
      } else {
        wait(lock);
      }
    }
  }

  // The oldest published nested job with indices left, or null. REQUIRES: mutex_ held.
  Job* open_job() const {
    for (Job* job : open_) {
      if (job->unclaimed()) return job;
    }
    return nullptr;
  }
  // Works on a nested job beside its caller. REQUIRES: lock holds mutex_.
  void help(std::unique_lock<std::mutex>& lock, Job& job) {
    ++job.helpers;
    lock.unlock();
    job.work();
    lock.lock();
    --job.helpers;
    changed_.notify_all();
  }
  // Waits, counted as idle, for the next change. REQUIRES: lock holds mutex_.
  void wait(std::unique_lock<std::mutex>& lock) {
    idle_.fetch_add(1, std::memory_order_relaxed);
    changed_.wait(lock);
    idle_.fetch_sub(1, std::memory_order_relaxed);
  }

  std::mutex mutex_;
  std::condition_variable changed_;  // any change: a job published or left, a worker done, stop
  std::vector<std::thread> threads_;
  Job* job_ = nullptr;      // the top-level job workers may join
  std::vector<Job*> open_;  // nested jobs idle threads may join
  std::uint64_t generation_ = 0;
  int active_ = 0;            // workers inside the top-level job
  std::atomic<int> idle_{0};  // threads waiting in wait()
  bool stop_ = false;
};

int default_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(std::min<unsigned>(cores, kMaxThreads));
}

std::atomic<int> g_threads{default_threads()};
std::mutex g_submit;  // one top-level job at a time

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

int thread_count() { return g_threads.load(); }

void set_thread_count(int threads) {
  SHARDSIM_ASSERT(threads >= 1 && threads <= kMaxThreads, "set_thread_count: 1..kMaxThreads");
  g_threads.store(threads);
}

int parse_thread_count(std::string_view text, std::string_view origin) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 1 || value > kMaxThreads) {
    throw InputError(std::string(origin) + ": invalid thread count '" + std::string(text) +
                     "' (a whole number from 1 to " + std::to_string(kMaxThreads) + ")");
  }
  return value;
}

void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body) {
  if (n <= 0) return;
  const int threads = thread_count();
  if (t_inside_parallel_for) {
    // Nested: shared only with threads that are idle now (the pool is the outer job's).
    if (n > 1 && pool().has_idle()) {
      Job job(n, body, threads);
      pool().run_nested(job);
      if (job.error) std::rethrow_exception(job.error);
      return;
    }
  } else if (n > 1 && threads > 1) {
    const std::lock_guard submit(g_submit);
    Pool& workers = pool();
    if (workers.workers() != threads - 1) workers.resize(threads - 1);
    Job job(n, body, threads);
    workers.run(job);
    if (job.error) std::rethrow_exception(job.error);
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace shardsim
