// ThreadPool and Barrier: every index runs once, barriers order memory, parallel_for covers every item once,
// errors come back as statuses, and an idle pool sleeps instead of spinning.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

using namespace kt;

namespace {

std::unique_ptr<ThreadPool> make_pool(int n, int64_t spin_ns = kDefaultSpinNs) {
    ThreadPoolOptions o;
    o.n_threads = n;
    o.spin_ns = spin_ns;
    std::unique_ptr<ThreadPool> pool;
    REQUIRE(ThreadPool::create(o, &pool).is_ok());
    return pool;
}

double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// /proc/self/task/<tid> of each thread of this process whose name starts with `prefix`.
std::vector<std::string> thread_dirs(const std::string &prefix) {
    std::vector<std::string> dirs;
    DIR *dir = opendir("/proc/self/task");
    if (!dir) return dirs;
    while (dirent *e = readdir(dir)) {
        if (e->d_name[0] == '.') continue;
        const std::string base = std::string("/proc/self/task/") + e->d_name;
        std::ifstream comm(base + "/comm");
        std::string name;
        std::getline(comm, name);
        if (name.rfind(prefix, 0) == 0) dirs.push_back(base);
    }
    closedir(dir);
    return dirs;
}

// The scheduler state letter of each such thread.
std::vector<char> thread_states(const std::string &prefix) {
    std::vector<char> states;
    for (const std::string &base : thread_dirs(prefix)) {
        std::ifstream stat(base + "/stat");
        std::string line;
        std::getline(stat, line);
        const size_t paren = line.rfind(')');
        if (paren != std::string::npos && paren + 2 < line.size()) states.push_back(line[paren + 2]);
    }
    return states;
}

// Waits (bounded, about 2 s) until `count` such threads exist and all are asleep ('S'); spinning ones stay 'R'.
// Returns their last states.
std::string wait_until_asleep(const std::string &prefix, size_t count) {
    std::vector<char> states;
    for (int attempt = 0; attempt < 200; ++attempt) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        states = thread_states(prefix);
        if (states.size() == count && std::all_of(states.begin(), states.end(), [](char c) { return c == 'S'; })) break;
    }
    return std::string(states.begin(), states.end());
}

// How many times such threads have left a CPU, voluntarily (to sleep) or not: a sleeping worker that is woken
// adds at least one.
int64_t context_switches(const std::string &prefix) {
    int64_t total = 0;
    for (const std::string &base : thread_dirs(prefix)) {
        std::ifstream status(base + "/status");
        std::string line;
        while (std::getline(status, line))
            if (line.find("ctxt_switches:") != std::string::npos) total += std::stoll(line.substr(line.find(':') + 1));
    }
    return total;
}

}  // namespace

TEST_CASE("thread pool: run executes every index exactly once") {
    for (int n : {1, 2, 3, 8}) {
        auto pool = make_pool(n);
        CHECK(pool->size() == n);
        for (int rep = 0; rep < 50; ++rep) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            for (auto &h : hits) h = 0;
            std::atomic<int> caller_index{-1}, wrong{0};
            const std::thread::id caller = std::this_thread::get_id();
            // The job runs on the workers: it records what it sees, and only this thread asserts (Catch2's
            // assertions are not thread-safe).
            REQUIRE(pool->run([&](int i) {
                if (i < 0 || i >= n || pool->current_thread_index() != i) {
                    wrong.fetch_add(1);
                    return;
                }
                hits[static_cast<size_t>(i)].fetch_add(1);
                if (std::this_thread::get_id() == caller) caller_index = i;
            }).is_ok());
            CHECK(wrong.load() == 0);
            for (auto &h : hits) CHECK(h.load() == 1);
            CHECK(caller_index.load() == 0);  // the caller takes part as thread 0
        }
        CHECK(pool->current_thread_index() == -1);
    }
}

TEST_CASE("thread pool: barrier makes every thread's writes visible to all") {
    const int n = 4;
    auto pool = make_pool(n);
    std::vector<int64_t> slots(n, 0);
    std::atomic<int> mismatches{0};
    REQUIRE(pool->run([&](int i) {
        for (int64_t round = 1; round <= 200; ++round) {
            slots[static_cast<size_t>(i)] = round * 10 + i;
            pool->barrier();
            for (int j = 0; j < n; ++j)
                if (slots[static_cast<size_t>(j)] != round * 10 + j) mismatches.fetch_add(1);
            pool->barrier();  // nobody writes the next round before everyone has read this one
        }
    }).is_ok());
    CHECK(mismatches.load() == 0);
}

TEST_CASE("thread pool: standalone barrier with sleeping waiters") {
    // Spin 0: every wait goes straight to the futex, which exercises the sleep/wake path.
    const int n = 3;
    Barrier barrier(n, 0);
    std::vector<int> counters(n, 0);
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t) {
        threads.emplace_back([&, t] {
            for (int round = 1; round <= 100; ++round) {
                counters[static_cast<size_t>(t)] = round;
                barrier.arrive_and_wait();
                for (int j = 0; j < n; ++j)
                    if (counters[static_cast<size_t>(j)] != round) errors.fetch_add(1);
                barrier.arrive_and_wait();
            }
        });
    }
    for (auto &th : threads) th.join();
    CHECK(errors.load() == 0);
}

TEST_CASE("thread pool: parallel_for covers every item exactly once") {
    auto pool = make_pool(3);
    for (int64_t n : {0, 1, 7, 64, 1000, 12345}) {
        for (int64_t grain : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{64}, int64_t{100000}}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            for (auto &h : hits) h = 0;
            std::atomic<int> bad_chunks{0};
            REQUIRE(pool->parallel_for(n, grain, [&](int64_t b, int64_t e, int t) {
                if (!(b >= 0 && b < e && e <= n && t >= 0 && t < 3)) {
                    bad_chunks.fetch_add(1);
                    return;
                }
                for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
            }).is_ok());
            int64_t wrong = 0;
            for (auto &h : hits) wrong += h.load() != 1;
            INFO("n=" << n << " grain=" << grain);
            CHECK(bad_chunks.load() == 0);
            CHECK(wrong == 0);
        }
    }
}

TEST_CASE("thread pool: run_available and parallel_for never wait for a worker that cannot start") {
    // Worker 2 is held in on_worker_start, as a worker pinned to a core that another process keeps busy is held by
    // the scheduler. Jobs that any thread can finish must complete without it; run() could not.
    std::atomic<bool> release{false};
    ThreadPoolOptions o;
    o.n_threads = 3;
    o.on_worker_start = [&](int index) {
        if (index != 2) return;
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    std::unique_ptr<ThreadPool> pool;
    REQUIRE(ThreadPool::create(o, &pool).is_ok());

    int wrong = 0, held_ran = 0;
    for (int round = 0; round < 200; ++round) {
        const int64_t n = 1 + round % 37;
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        for (auto &h : hits) h = 0;
        std::atomic<int> from_held{0};
        REQUIRE(pool->parallel_for(n, 1 + round % 3, [&](int64_t b, int64_t e, int t) {
            if (t == 2) from_held.fetch_add(1);
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        }).is_ok());
        for (auto &h : hits) wrong += h.load() != 1;
        held_ran += from_held.load();
    }
    CHECK(wrong == 0);
    CHECK(held_ran == 0);

    // Released, the worker joins later jobs, and run() again waits for every worker.
    release.store(true);
    std::atomic<int> seen{0};
    REQUIRE(pool->run([&](int i) { seen.fetch_or(1 << i); }).is_ok());
    CHECK(seen.load() == 7);
}

TEST_CASE("thread pool: run_alone and a single-chunk parallel_for run on the caller and wake no worker") {
    // Work smaller than a hand-off (kMinParallelMacs) runs on the caller alone. The workers never spin (spin_ns 0)
    // and each round starts after a pause long enough for them to be asleep in the kernel, so any job handed to
    // them would show as a context switch of theirs.
    ThreadPoolOptions o;
    o.n_threads = 3;
    o.spin_ns = 0;
    o.name = "kt-alone";
    std::unique_ptr<ThreadPool> pool;
    REQUIRE(ThreadPool::create(o, &pool).is_ok());
    REQUIRE(wait_until_asleep("kt-alone", 2) == "SS");
    const int64_t switches_before = context_switches("kt-alone");

    const std::thread::id caller = std::this_thread::get_id();
    int wrong = 0, missed = 0;
    for (int round = 0; round < 200; ++round) {
        std::this_thread::sleep_for(std::chrono::microseconds(500));
        std::atomic<int> bad{0};
        REQUIRE(pool->run_alone([&](int i) {
            if (i != 0 || pool->current_thread_index() != 0 || std::this_thread::get_id() != caller) bad.fetch_add(1);
        }).is_ok());
        const int64_t n = 1 + round % 50;
        std::vector<int> hits(static_cast<size_t>(n), 0);
        REQUIRE(pool->parallel_for(n, 50 + round % 7, [&](int64_t b, int64_t e, int t) {
            if (t != 0 || std::this_thread::get_id() != caller) bad.fetch_add(1);
            for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
        }).is_ok());
        for (int h : hits) missed += h != 1;
        wrong += bad.load();
    }
    CHECK(wrong == 0);
    CHECK(missed == 0);
    CHECK(context_switches("kt-alone") == switches_before);
    CHECK(pool->current_thread_index() == -1);

    // Errors as in run(), and the pool stays usable (now the workers wake).
    Status s = pool->run_alone([](int) { throw std::runtime_error("alone"); });
    CHECK(s.code() == KT_STATUS_INTERNAL);
    CHECK(s.message().find("alone") != std::string::npos);
    std::atomic<int> nested_misuse{0}, seen{0};
    REQUIRE(pool->run([&](int i) {
        if (pool->run_alone([](int) {}).code() == KT_STATUS_MISUSE) nested_misuse.fetch_add(1);
        seen.fetch_or(1 << i);
    }).is_ok());
    CHECK(nested_misuse.load() == 3);
    CHECK(seen.load() == 7);
}

TEST_CASE("thread pool: a worker that arrives late never runs a closed job, and each index runs at most once") {
    // Alternates open jobs with run() jobs so that workers woken for a closed job meet the next one. The job and
    // what it counts live for the whole test, so that a run after its call returned is counted whenever it happens
    // (rather than touching a dead stack frame); every 100 rounds, and at the end, the test waits for such a run.
    auto pool = make_pool(3, 0);
    std::atomic<bool> open{false};
    std::atomic<int> per_index[3];
    std::atomic<int> late{0};
    auto job = [&](int i) {
        if (!open.load()) late.fetch_add(1);
        per_index[i].fetch_add(1);
    };
    int twice = 0, missing = 0;
    for (int round = 0; round < 3000; ++round) {
        for (auto &c : per_index) c = 0;
        open.store(true);
        if (round % 3 == 2) {
            REQUIRE(pool->run(job).is_ok());
            for (auto &c : per_index) missing += c.load() != 1;
        } else {
            REQUIRE(pool->run_available(job).is_ok());
            CHECK(per_index[0].load() == 1);
            for (auto &c : per_index) twice += c.load() > 1;
        }
        open.store(false);
        if (round % 100 == 99) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(late.load() == 0);
    CHECK(twice == 0);
    CHECK(missing == 0);
}

TEST_CASE("thread pool: exceptions and nested runs become statuses and the pool stays usable") {
    auto pool = make_pool(3);
    Status s = pool->run([&](int i) {
        if (i == 2) throw std::runtime_error("boom");
    });
    CHECK(s.code() == KT_STATUS_INTERNAL);
    CHECK(s.message().find("boom") != std::string::npos);

    s = pool->run([&](int i) {
        if (i == 1) throw std::bad_alloc();
    });
    CHECK(s.code() == KT_STATUS_OUT_OF_MEMORY);

    std::atomic<int> nested_misuse{0};
    REQUIRE(pool->run([&](int) {
        const Status inner = pool->run([](int) {});
        if (inner.code() == KT_STATUS_MISUSE) nested_misuse.fetch_add(1);
    }).is_ok());
    CHECK(nested_misuse.load() == 3);

    std::atomic<int> count{0};
    CHECK(pool->run([&](int) { count.fetch_add(1); }).is_ok());
    CHECK(count.load() == 3);
}

TEST_CASE("thread pool: a job may run another pool's job") {
    auto outer = make_pool(2);
    auto inner = make_pool(2);
    std::atomic<int> inner_runs{0}, wrong_index{0};
    Status inner_status;
    bool outer_index_restored = false;
    REQUIRE(outer->run([&](int i) {
        if (i != 0) return;
        inner_status = inner->run([&](int j) {
            inner_runs.fetch_add(1);
            if (inner->current_thread_index() != j) wrong_index.fetch_add(1);
        });
        outer_index_restored = outer->current_thread_index() == 0;  // restored after the inner job
    }).is_ok());
    CHECK(inner_status.is_ok());
    CHECK(outer_index_restored);
    CHECK(wrong_index.load() == 0);
    CHECK(inner_runs.load() == 2);
}

TEST_CASE("thread pool: concurrent callers are serialized") {
    auto pool = make_pool(3);
    std::atomic<int> inside{0}, overlap{0}, total{0}, failed_runs{0};
    auto caller = [&] {
        for (int r = 0; r < 100; ++r) {
            const Status s = pool->run([&](int i) {
                if (i == 0 && inside.fetch_add(1) != 0) overlap.fetch_add(1);
                total.fetch_add(1);
                pool->barrier();
                if (i == 0) inside.fetch_sub(1);
            });
            if (!s.is_ok()) failed_runs.fetch_add(1);
        }
    };
    std::thread a(caller), b(caller);
    a.join();
    b.join();
    CHECK(failed_runs.load() == 0);
    CHECK(overlap.load() == 0);
    CHECK(total.load() == 2 * 100 * 3);
}

TEST_CASE("thread pool: on_worker_start runs once on every worker") {
    std::mutex m;
    std::set<int> started;
    ThreadPoolOptions o;
    o.n_threads = 4;
    o.on_worker_start = [&](int i) {
        std::lock_guard<std::mutex> lock(m);
        started.insert(i);
    };
    std::unique_ptr<ThreadPool> pool;
    REQUIRE(ThreadPool::create(o, &pool).is_ok());
    REQUIRE(pool->run([](int) {}).is_ok());  // every worker has started once it has run a job
    std::lock_guard<std::mutex> lock(m);
    CHECK(started == std::set<int>{1, 2, 3});
}

TEST_CASE("thread pool: bad options are rejected") {
    std::unique_ptr<ThreadPool> pool;
    ThreadPoolOptions o;
    o.n_threads = 0;
    CHECK(ThreadPool::create(o, &pool).code() == KT_STATUS_INVALID_ARGUMENT);
    o.n_threads = 2;
    o.spin_ns = -1;
    CHECK(ThreadPool::create(o, &pool).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(pool == nullptr);
}

TEST_CASE("thread pool: an idle pool sleeps and uses no CPU") {
    // A functional property, not a speed: after the spin window, idle workers must be blocked in the kernel.
    ThreadPoolOptions o;
    o.n_threads = 4;
    o.spin_ns = 2'000'000;  // 2 ms
    o.name = "kt-idle";
    std::unique_ptr<ThreadPool> pool;
    REQUIRE(ThreadPool::create(o, &pool).is_ok());
    std::atomic<int> count{0};
    REQUIRE(pool->run([&](int) { count.fetch_add(1); }).is_ok());

    // Every worker falls asleep once its spin window is over.
    CHECK(wait_until_asleep("kt-idle", 3) == "SSS");

    // And they stay asleep: over 200 ms the whole process uses far less CPU than one spinning thread would.
    const double before = process_cpu_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double used = process_cpu_seconds() - before;
    CHECK(used < 0.05);

    REQUIRE(pool->run([&](int) { count.fetch_add(1); }).is_ok());  // and wake up for the next job
    CHECK(count.load() == 8);
}
