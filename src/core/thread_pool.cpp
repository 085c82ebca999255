#include "core/thread_pool.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <system_error>

namespace kt {
namespace {

// The pool whose job the current thread is running (to reject a nested run() instead of deadlocking).
thread_local const ThreadPool *tls_pool = nullptr;
thread_local int tls_index = -1;

Status status_from_current_exception() {
    try {
        throw;
    } catch (const std::bad_alloc &) {
        return Status(KT_STATUS_OUT_OF_MEMORY, "thread pool job: out of memory");
    } catch (const std::exception &e) {
        return Status(KT_STATUS_INTERNAL, std::string("thread pool job: ") + e.what());
    } catch (...) {
        return Status(KT_STATUS_INTERNAL, "thread pool job: unknown exception");
    }
}

}  // namespace

void cpu_relax() { _mm_pause(); }
void cpu_yield() { sched_yield(); }

int64_t monotonic_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// ------------------------------------------------------------------------------------------------------------
// Barrier

void Barrier::arrive_and_wait() {
    if (participants_ <= 1) return;
    // Read the phase before arriving: once this thread has arrived, the last one may advance it at any moment.
    const uint32_t phase = phase_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(participants_)) {
        arrived_.store(0, std::memory_order_relaxed);  // nobody touches it before seeing the new phase
        phase_.fetch_add(1, std::memory_order_release);
        phase_.notify_all();
        return;
    }
    spin_then_wait(phase_, spin_ns_, [phase](uint32_t v) { return v != phase; });
}

// ------------------------------------------------------------------------------------------------------------
// ThreadPool

ThreadPool::ThreadPool(const ThreadPoolOptions &options)
    : n_threads_(options.n_threads),
      spin_ns_(options.spin_ns),
      on_worker_start_(options.on_worker_start),
      name_(options.name),
      job_barrier_(options.n_threads, options.spin_ns) {}

Status ThreadPool::create(ThreadPoolOptions options, std::unique_ptr<ThreadPool> *out) {
    KT_RETURN_IF(options.n_threads < 1 || options.n_threads > 4096, KT_STATUS_INVALID_ARGUMENT,
                 "thread pool: n_threads = %d (must be 1..4096)", options.n_threads);
    KT_RETURN_IF(options.spin_ns < 0, KT_STATUS_INVALID_ARGUMENT, "thread pool: spin_ns = %lld is negative",
                 static_cast<long long>(options.spin_ns));
    std::unique_ptr<ThreadPool> pool(new ThreadPool(options));
    pool->workers_.reserve(static_cast<size_t>(options.n_threads - 1));
    try {
        for (int i = 1; i < options.n_threads; ++i) pool->workers_.emplace_back([p = pool.get(), i] { p->worker_main(i); });
    } catch (const std::system_error &e) {
        // The destructor stops and joins the workers that did start.
        return Status::error(KT_STATUS_OUT_OF_MEMORY, "thread pool: cannot start worker %zu of %d: %s",
                             pool->workers_.size() + 1, options.n_threads - 1, e.what());
    }
    *out = std::move(pool);
    return Status::ok();
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (std::thread &t : workers_) t.join();
}

void ThreadPool::worker_main(int index) {
    const std::string thread_name = (name_ + "-" + std::to_string(index)).substr(0, 15);
    pthread_setname_np(pthread_self(), thread_name.c_str());
    if (on_worker_start_) {
        try {
            on_worker_start_(index);
        } catch (...) {  // placement is best effort: an unpinned worker is slower, not wrong
        }
    }
    uint32_t seen = 0;
    for (;;) {
        seen = spin_then_wait(generation_, spin_ns_, [seen](uint32_t g) { return g != seen; });
        if (stop_.load(std::memory_order_acquire)) return;
        // A worker that woke late may find its job closed, or already replaced by the next one (whose generation
        // it will see on its next wait): then it has nothing to do and the caller does not count on it.
        if (!try_enter(seen)) continue;
        execute(index);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_all();
    }
}

bool ThreadPool::try_enter(uint32_t generation) {
    uint64_t word = job_word_.load(std::memory_order_acquire);
    for (;;) {
        if (static_cast<uint32_t>(word >> 32) != generation || !(word & kOpen)) return false;
        if (job_word_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire))
            return true;
    }
}

void ThreadPool::execute(int index) {
    // Restored afterwards: the caller of run() may itself be a worker of another pool.
    const ThreadPool *const outer_pool = tls_pool;
    const int outer_index = tls_index;
    tls_pool = this;
    tls_index = index;
    try {
        (*job_)(index);
    } catch (...) {
        Status s = status_from_current_exception();
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (first_error_.is_ok()) first_error_ = std::move(s);
    }
    tls_pool = outer_pool;
    tls_index = outer_index;
}

Status ThreadPool::run(FunctionRef<void(int)> fn) { return run_job(fn, Workers::kEvery); }

Status ThreadPool::run_available(FunctionRef<void(int)> fn) { return run_job(fn, Workers::kAvailable); }

Status ThreadPool::run_alone(FunctionRef<void(int)> fn) { return run_job(fn, Workers::kNone); }

Status ThreadPool::run_job(FunctionRef<void(int)> fn, Workers wanted) {
    KT_RETURN_IF(tls_pool == this, KT_STATUS_MISUSE, "thread pool: run() called from inside one of its own jobs");
    std::lock_guard<std::mutex> lock(run_mutex_);
    job_ = &fn;
    first_error_ = Status::ok();
    const uint32_t workers = wanted == Workers::kNone ? 0 : static_cast<uint32_t>(n_threads_ - 1);
    pending_.store(workers, std::memory_order_relaxed);
    if (workers > 0) {
        const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
        job_word_.store(uint64_t{generation} << 32 | kOpen, std::memory_order_relaxed);
        generation_.store(generation, std::memory_order_release);  // publishes job_, pending_ and job_word_
        generation_.notify_all();
    }
    execute(0);
    if (workers > 0 && wanted == Workers::kAvailable) {
        // Close the job; the workers that did not enter it are not waited for.
        const uint32_t entered = static_cast<uint32_t>(
            job_word_.fetch_and(~kOpen, std::memory_order_acq_rel) & kEnteredMask);
        if (entered < workers) pending_.fetch_sub(workers - entered, std::memory_order_acq_rel);
    }
    spin_then_wait(pending_, spin_ns_, [](uint32_t v) { return v == 0; });
    job_ = nullptr;
    std::lock_guard<std::mutex> error_lock(error_mutex_);
    return std::move(first_error_);
}

Status ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t, int)> fn) {
    if (n <= 0) return Status::ok();
    grain = std::max<int64_t>(grain, 1);
    alignas(64) std::atomic<int64_t> next{0};
    auto chunks = [&](int index) {
        for (;;) {
            const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
            if (begin >= n) return;
            fn(begin, std::min(begin + grain, n), index);
        }
    };
    // One chunk has no work for a second thread: waking one would only add its hand-off.
    return n <= grain ? run_alone(chunks) : run_available(chunks);
}

int ThreadPool::current_thread_index() const { return tls_pool == this ? tls_index : -1; }

}  // namespace kt
