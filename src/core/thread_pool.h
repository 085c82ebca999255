// ThreadPool: a fixed set of worker threads that spin briefly and then sleep, with SPMD jobs, barriers and a
// dynamic parallel-for.
//
// Why this shape:
//   - MoE layers are a sequence of short phases (quantize, gate/up, down, merge) separated by barriers, run once
//     per layer per token in decode. An SPMD job ("every thread runs this function with its index") with
//     barriers inside keeps the threads and their cache state for the whole layer, instead of paying a fork/join
//     per phase.
//   - Idle workers must cost nothing: a library embedded in an inference server cannot busy-poll cores it does
//     not own (kt-kernel's workers poll for 50 ms). Every wait here spins for `spin_ns` (decode calls arrive
//     back to back, and a futex wake-up costs several microseconds per thread), then sleeps in the kernel
//     (std::atomic::wait, a futex on Linux). A pool with no job uses no CPU.
//   - The thread that calls run() takes part as thread 0, so a pool of n threads owns n - 1 workers and a
//     synchronous caller never sits idle while its core is needed. The expert pool calls run() from its own
//     pinned driver thread so that a host thread is never recruited or re-pinned.
//   - A job that any number of threads can finish (parallel_for, run_available) does not wait for workers that
//     have not started it. On a busy host a worker may wait milliseconds for a core; a job that waited for every
//     worker to check in took that wait once per job, and a small model makes thousands of jobs per token (a
//     fuzzer's input took 0.85 s alone and 50 s beside two busy processes). Such a job is closed when the caller
//     has finished its share; a worker that arrives later finds it closed and goes back to waiting.
//   - Threads are placed by the owner: on_worker_start runs first on each worker (the mem layer pins it to a
//     core; core/ cannot depend on hwloc).
//
// Thread safety: run() and parallel_for() may be called from any thread; concurrent calls are serialized (one job
// at a time). A job must not call run() on its own pool (MISUSE). barrier() may only be called from inside a job,
// by every participant the same number of times. A job function must not throw across a barrier (the other
// threads would wait forever); an exception that leaves the job function is caught and returned as a Status.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/function_ref.h"
#include "core/status.h"

namespace kt {

// Default time a waiting thread spins before it sleeps.
inline constexpr int64_t kDefaultSpinNs = 100'000;

// Work, in multiply-adds, below which a job is cheaper on its caller alone than handed out. Waking a sleeping
// worker costs 5-50 us in a virtual machine (a futex wake through the hypervisor, then the worker's own trip back),
// and even a spinning one costs cache-line round trips; 2^18 multiply-adds take 1-5 us on one core (a 256 K-weight
// Q4_K GEMV streams 144 KB). A tiny model is made of nothing but such jobs: one fuzzer input made ~540 of them.
inline constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

// Waits until done(word) holds: spins for spin_ns (checking the word), then sleeps until the word changes.
// Returns the value that satisfied done. Whoever changes the word must call notify_all()/notify_one() on it.
// The first kPauseSpinNs of the spin are pause instructions; the rest yields the CPU between checks, so that a
// thread sharing the core (the host's thread that will submit the next job, typically) runs at once instead of
// after the scheduler's time slice: a pure pause loop made the next call wait milliseconds for its submitter.
template <typename Done>
uint32_t spin_then_wait(const std::atomic<uint32_t> &word, int64_t spin_ns, Done &&done);

// A reusable barrier for a fixed number of participants, spinning then sleeping.
class Barrier {
public:
    Barrier(int participants, int64_t spin_ns) : participants_(participants), spin_ns_(spin_ns) {}
    Barrier(const Barrier &) = delete;
    Barrier &operator=(const Barrier &) = delete;

    int participants() const { return participants_; }
    void arrive_and_wait();

private:
    alignas(64) std::atomic<uint32_t> arrived_{0};
    alignas(64) std::atomic<uint32_t> phase_{0};
    int participants_;
    int64_t spin_ns_;
};

struct ThreadPoolOptions {
    int n_threads = 1;              // participants in a job, the caller of run() included; >= 1
    int64_t spin_ns = kDefaultSpinNs;
    std::string name = "kt";        // worker thread names: "<name>-<index>" (truncated to 15 characters)
    // Runs on each worker thread (index 1..n_threads-1) before it takes any job, e.g. to pin it to a core.
    std::function<void(int worker_index)> on_worker_start;
};

class ThreadPool {
public:
    static Status create(ThreadPoolOptions options, std::unique_ptr<ThreadPool> *out);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    int size() const { return n_threads_; }
    int64_t spin_ns() const { return spin_ns_; }

    // Runs fn(thread_index) on every participant: the calling thread as 0, the workers as 1..size()-1, and
    // returns when all have finished. The first exception thrown by fn on any thread comes back as a Status.
    Status run(FunctionRef<void(int)> fn);

    // Runs fn(thread_index) on the calling thread (as 0) and on each worker that starts before the caller's own
    // call has returned; returns when every thread that started has finished. fn must be able to complete the
    // whole job on the caller alone (threads claim work from a shared counter) and must not call barrier(). Each
    // index runs at most once, so per-index scratch stays private. Errors as in run().
    Status run_available(FunctionRef<void(int)> fn);

    // Runs fn(0) on the calling thread alone, as a job of this pool (serialized with the others, so thread 0's
    // scratch stays private; errors as in run()), without waking a worker: for a job whose work is smaller than
    // a hand-off costs (kMinParallelMacs). fn must be able to complete the whole job alone, as in run_available.
    Status run_alone(FunctionRef<void(int)> fn);

    // Inside a run() job: waits until every participant has reached the same barrier.
    void barrier() { job_barrier_.arrive_and_wait(); }

    // Calls fn(begin, end, thread_index) over [0, n) in chunks of `grain` items, handed out dynamically (an
    // atomic counter), so threads that finish early take more. Runs as run_available: it never waits for a worker
    // that has not started; a single chunk (n <= grain) runs as run_alone. grain < 1 is treated as 1.
    Status parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t, int)> fn);

    // The index of the calling thread inside the job currently running on this pool, or -1.
    int current_thread_index() const;

private:
    explicit ThreadPool(const ThreadPoolOptions &options);
    enum class Workers { kEvery, kAvailable, kNone };
    Status run_job(FunctionRef<void(int)> fn, Workers workers);
    void worker_main(int index);
    bool try_enter(uint32_t generation);
    void execute(int index);

    // The job word: the job's generation in the high 32 bits, kOpen while workers may still enter it, and in the
    // low bits the number of workers that entered. One word, so that a worker enters only the job it was woken for
    // and only while it is open, and the caller that closes it learns at once how many entered.
    static constexpr uint64_t kOpen = uint64_t{1} << 31;
    static constexpr uint64_t kEnteredMask = kOpen - 1;

    const int n_threads_;
    const int64_t spin_ns_;
    std::function<void(int)> on_worker_start_;
    std::string name_;
    std::vector<std::thread> workers_;

    std::mutex run_mutex_;                      // one job at a time
    const FunctionRef<void(int)> *job_ = nullptr;
    alignas(64) std::atomic<uint32_t> generation_{0};  // bumped to publish a job (or stop)
    alignas(64) std::atomic<uint64_t> job_word_{0};    // see kOpen
    alignas(64) std::atomic<uint32_t> pending_{0};     // workers the caller still waits for
    std::atomic<bool> stop_{false};
    Barrier job_barrier_;

    std::mutex error_mutex_;
    Status first_error_;
};

// ------------------------------------------------------------------------------------------------------------
// Implementation of the template

void cpu_relax();
void cpu_yield();
int64_t monotonic_ns();
inline constexpr int64_t kPauseSpinNs = 20'000;

template <typename Done>
uint32_t spin_then_wait(const std::atomic<uint32_t> &word, int64_t spin_ns, Done &&done) {
    uint32_t value = word.load(std::memory_order_acquire);
    if (done(value)) return value;
    if (spin_ns > 0) {
        const int64_t start = monotonic_ns();
        bool yielding = false;
        for (uint32_t i = 1;; ++i) {
            if (yielding)
                cpu_yield();
            else
                cpu_relax();
            value = word.load(std::memory_order_acquire);
            if (done(value)) return value;
            // Reading the clock costs ~20 ns; every 64 pauses keeps it out of the loop's cost.
            if (yielding || (i & 63) == 0) {
                const int64_t elapsed = monotonic_ns() - start;
                if (elapsed > spin_ns) break;
                yielding = elapsed > kPauseSpinNs;
            }
        }
    }
    while (!done(value)) {
        word.wait(value, std::memory_order_acquire);
        value = word.load(std::memory_order_acquire);
    }
    return value;
}

}  // namespace kt
