#include "moe/linear.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "backends/cpu/amx/amx_gemm.h"

namespace kt::moe {
namespace {

// Panels per task: enough work per hand-out, enough tasks to balance (decode GEMVs are short).
int64_t panel_grain(int64_t panels, int threads) { return std::max<int64_t>(1, panels / (8 * std::max(threads, 1))); }

// One thread's contiguous share of the panels, handed out a chunk at a time from its cursor.
struct alignas(64) Region {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
};

}  // namespace

Status PackedLinear::create(const MatrixSource &w, TargetFormat format, const float *bias, const cpu::KernelSet &kernels,
                            ThreadPool *pool, std::unique_ptr<PackedLinear> *out, PackedStore *store, const char *name) {
    std::unique_ptr<PackedLinear> l(new PackedLinear());
    l->kernels_ = &kernels;
    PackSpec spec;
    KT_TRY(pack_spec_for(w, format, 128, &spec));
    KT_TRY(slice_layout(w, spec, 0, w.rows, 0, w.cols, &l->matrix_.layout));
    const cpu::PackedLayout &layout = l->matrix_.layout;
    if (layout.type != cpu::PackedType::kBf16) {
        l->spec_ = cpu::quant_spec(layout);
        l->sums_ld_ = cpu::quant_sums_per_row(l->spec_, layout.k);
    }
    if (bias) l->bias_.assign(bias, bias + w.rows);
    PackedBufferDesc desc;
    desc.part = PackedBufferDesc::kLinear;
    desc.layout = layout;
    desc.stride = layout.bytes;
    const PackedRequest request{name, desc, &l->buffer_};
    if (store && store->take(&request, 1)) {
        l->matrix_.data = l->buffer_.data();
        *out = std::move(l);
        return Status::ok();
    }
    KT_TRY(mem::WeightStorage::allocate(layout.bytes, nullptr, -1, &l->buffer_));
    l->matrix_.data = l->buffer_.data();
    uint8_t *dst = l->buffer_.writable();
    std::mutex failed_mutex;
    Status failed;
    auto pack = [&](int64_t p0, int64_t p1, int) {
        Status s = pack_slice(w, spec, 0, 0, layout, p0, p1, dst);
        if (!s.is_ok()) {
            std::lock_guard<std::mutex> lock(failed_mutex);
            if (failed.is_ok()) failed = std::move(s);
        }
    };
    if (pool)
        KT_TRY(pool->parallel_for(layout.panels, 4, pack));
    else
        pack(0, layout.panels, 0);
    KT_TRY(std::move(failed));
    drop_packed_rows(w, 0, w.rows);
    if (store) store->keep(name, desc, l->buffer_);
    *out = std::move(l);
    return Status::ok();
}

Status PackedLinear::forward(const float *x, int64_t n_tokens, float *y, int64_t ldy, Workspace *ws,
                             ThreadPool *pool) const {
    if (n_tokens <= 0) return Status::ok();
    const cpu::KernelSet &ks = *kernels_;
    const int64_t K = matrix_.layout.k, N = matrix_.layout.n, kp = matrix_.layout.kp;
    cpu::GemmActs acts;
    auto run = [&](int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t, int)> fn) -> Status {
        if (pool && n > 1) return pool->parallel_for(n, grain, fn);
        fn(0, n, 0);
        return Status::ok();
    };
    const bool bf16 = matrix_.layout.type == cpu::PackedType::kBf16;
    ws->q.resize(static_cast<size_t>((n_tokens * kp * (bf16 ? 2 : 1) + 63) / 64));
    if (bf16) {
        uint16_t *xb = reinterpret_cast<uint16_t *>(ws->q.data());
        KT_TRY(run(n_tokens, 8, [&](int64_t t0, int64_t t1, int) {
            for (int64_t t = t0; t < t1; ++t) ks.convert_row_bf16(x + t * K, false, K, kp, xb + t * kp);
        }));
        acts.bf16 = xb;
        acts.bf16_ld = kp;
    } else {
        int8_t *xq = reinterpret_cast<int8_t *>(ws->q.data());
        ws->scale.resize(static_cast<size_t>(n_tokens));
        ws->sums.resize(static_cast<size_t>(n_tokens * sums_ld_));
        KT_TRY(run(n_tokens, 8, [&](int64_t t0, int64_t t1, int) {
            for (int64_t t = t0; t < t1; ++t) {
                int8_t *q = xq + t * kp;
                ws->scale[static_cast<size_t>(t)] = ks.quantize_row(x + t * K, false, K, kp, q);
                cpu::group_sums_row(q, K, spec_, ws->sums.data() + t * sums_ld_);
            }
        }));
        acts.q = xq;
        acts.q_ld = kp;
        acts.scale = ws->scale.data();
        acts.sums = ws->sums.data();
        acts.sums_ld = sums_ld_;
    }
    // Every call of this forward reads the same rows: the AMX set keeps its gathered copy on each thread.
    acts.rows_id = cpu::new_rows_ids(1);
    // Each thread walks its own contiguous region of panels, a chunk at a time, and prefetches its next chunk while
    // it computes one: a decode GEMV is one weight stream per thread. A single shared counter interleaved the
    // threads' chunks, so the kernel's prefetch of "the next panel" fetched the other thread's, and a one-panel
    // chunk (a K or V projection) streamed with no software prefetch at all. A thread done with its region takes
    // the remaining chunks of the others, so a slow thread still does not hold up the call, and the call does not
    // wait for a worker that has not started (run_available). Each thread brackets all of its AMX calls with one
    // tile session.
    const int64_t panels = matrix_.layout.panels;
    const bool worth_sharing = panels > 1 && n_tokens * N * K >= kMinParallelMacs;
    const int threads = pool && worth_sharing ? pool->size() : 1;
    const int64_t grain = panel_grain(panels, threads);
    std::vector<Region> regions(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) {
        regions[static_cast<size_t>(t)].next.store(panels * t / threads, std::memory_order_relaxed);
        regions[static_cast<size_t>(t)].end = panels * (t + 1) / threads;
    }
    // Several rows: each thread lends the kernels scratch to decode each weight tile row and prepare each panel's
    // scales once (GemmActs).
    const size_t scratch_lines = !bf16 && n_tokens > 1 ? (cpu::gemm_scratch_bytes(matrix_.layout) + 63) / 64 : 0;
    if (ws->scratch.size() < scratch_lines * static_cast<size_t>(threads))
        ws->scratch.resize(scratch_lines * static_cast<size_t>(threads));
    auto work = [&](int thread) {
        cpu::amx::TileSession session;
        cpu::GemmActs a = acts;
        if (ks.level == cpu::IsaLevel::kAmx) a.tile_session = &session;
        if (scratch_lines > 0) a.scratch = ws->scratch[scratch_lines * static_cast<size_t>(thread)].bytes;
        for (int i = 0; i < threads; ++i) {
            Region &r = regions[static_cast<size_t>((thread + i) % threads)];
            for (;;) {
                const int64_t p0 = r.next.fetch_add(grain, std::memory_order_relaxed);
                if (p0 >= r.end) break;
                const int64_t p1 = std::min(p0 + grain, r.end);
                a.prefetch_next = p1 < r.end ? matrix_.tile(p1, 0, 0) : nullptr;
                const int64_t n0 = p0 * cpu::kPanel, n1 = std::min(p1 * cpu::kPanel, N);
                cpu::gemm(ks, matrix_, a, n_tokens, n0, n1, y + n0, ldy);
                if (!bias_.empty())
                    for (int64_t t = 0; t < n_tokens; ++t)
                        for (int64_t n = n0; n < n1; ++n) y[t * ldy + n] += bias_[static_cast<size_t>(n)];
            }
        }
        (void)session.end();  // a no-op unless AMX ran on this thread
    };
    if (threads > 1) return pool->run_available(work);
    work(0);
    return Status::ok();
}

}  // namespace kt::moe
