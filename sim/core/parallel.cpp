// The pool behind parallel_for (parallel.hpp): thread_count() - 1 persistent workers plus the
// calling thread claim blocks of indices from one atomic counter. One job runs at a time.
#include "shardsim/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardsim/error.hpp"
#include "shardsim/mp.hpp"
#include "shardsim/narrow_float.hpp"

namespace shardsim {

namespace {

thread_local bool t_inside_parallel_for = false;

struct Job {
  std::int64_t n = 0;
  std::int64_t block = 1;
  const std::function<void(std::int64_t)>* body = nullptr;
  unsigned mp_digits10 = 0;  // the caller's Mp::thread_default_precision()
  NarrowFormat narrow = NarrowFormat::bf16;  // the caller's narrow_float_format()
  std::atomic<std::int64_t> next{0};
  std::mutex error_mutex;
  std::int64_t first_error = -1;  // the smallest failing index, -1 while none failed
  std::exception_ptr error;

  // Claims blocks until none is left. Every index runs, even after a failure, so which error is
  // rethrown (the smallest index's) does not depend on timing.
  void work() {
    if (Mp::thread_default_precision() != mp_digits10) Mp::thread_default_precision(mp_digits10);
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
    t_inside_parallel_for = false;
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
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(); });
  }
  int workers() const { return static_cast<int>(threads_.size()); }

  void run(Job& job) {
    {
      const std::lock_guard lock(mutex_);
      job_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    job.work();
    std::unique_lock lock(mutex_);
    job_ = nullptr;  // a worker waking from now on finds nothing to join
    idle_.wait(lock, [this] { return active_ == 0; });
  }

 private:
  void loop() {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      Job* job = job_;
      ++active_;
      lock.unlock();
      job->work();
      lock.lock();
      if (--active_ == 0) idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<std::thread> threads_;
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
};

int default_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(std::min<unsigned>(cores, kMaxThreads));
}

std::atomic<int> g_threads{default_threads()};
std::mutex g_submit;  // one job at a time; nested calls run serially instead of taking it

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
  if (n == 1 || threads == 1 || t_inside_parallel_for) {
    for (std::int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  const std::lock_guard submit(g_submit);
  Pool& workers = pool();
  if (workers.workers() != threads - 1) workers.resize(threads - 1);
  Job job;
  job.n = n;
  // About eight blocks per thread: few atomic claims, and still balanced when indices differ in
  // cost (causal attention rows). The partition never changes what an index computes.
  job.block = std::max<std::int64_t>(1, n / (8 * static_cast<std::int64_t>(threads)));
  job.body = &body;
  job.mp_digits10 = Mp::thread_default_precision();
  job.narrow = narrow_float_format();
  workers.run(job);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace shardsim
