// kt_expert_pool_* and the CPU ISA cap: the C ABI over moe::ExpertPool.
#include <cstdio>
#include <cstring>
#include <string>

#include "api/api_internal.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels.h"
#include "moe/expert_pool.h"
#include "ops/types.h"

using kt::Status;
using kt::api::guard;
using kt::api::guard_on;

struct kt_expert_pool {
    std::unique_ptr<kt::moe::ExpertPool> pool;
    kt_thread_error_slot error;  // a pool takes calls from any thread
    std::string formats, description;  // backing store for kt_expert_pool_info strings
};

namespace {

Status make_config(const kt_expert_pool_params &p, kt::moe::ExpertPoolConfig *c) {
    KT_RETURN_IF(p.n_experts < 1 || p.hidden_size < 1 || p.intermediate_size < 1, KT_STATUS_INVALID_ARGUMENT,
                 "kt_expert_pool_create: n_experts (%d), hidden_size (%d) and intermediate_size (%d) must be >= 1",
                 p.n_experts, p.hidden_size, p.intermediate_size);
    c->n_experts = p.n_experts;
    c->hidden = p.hidden_size;
    c->intermediate = p.intermediate_size;
    c->max_tokens = p.max_tokens;
    c->max_top_k = p.max_top_k;
    switch (p.weight_format) {
        case KT_EXPERT_WEIGHTS_AS_SOURCE: c->format = kt::moe::TargetFormat::kAsSource; break;
        case KT_EXPERT_WEIGHTS_INT8: c->format = kt::moe::TargetFormat::kInt8; break;
        case KT_EXPERT_WEIGHTS_INT4: c->format = kt::moe::TargetFormat::kInt4; break;
        case KT_EXPERT_WEIGHTS_BF16: c->format = kt::moe::TargetFormat::kBf16; break;
        default: return Status::error(KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_create: weight_format %d", p.weight_format);
    }
    KT_RETURN_IF(p.weight_format == KT_EXPERT_WEIGHTS_INT4 && p.int4_group_size != 32 && p.int4_group_size != 64 &&
                     p.int4_group_size != 128,
                 KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_create: int4_group_size %d (must be 32, 64 or 128)",
                 p.int4_group_size);
    c->int4_group = p.int4_group_size;
    KT_RETURN_IF(p.input_type != KT_TYPE_F32 && p.input_type != KT_TYPE_BF16, KT_STATUS_INVALID_ARGUMENT,
                 "kt_expert_pool_create: input_type %d (KT_TYPE_F32 or KT_TYPE_BF16)", p.input_type);
    KT_RETURN_IF(p.output_type != KT_TYPE_F32 && p.output_type != KT_TYPE_BF16, KT_STATUS_INVALID_ARGUMENT,
                 "kt_expert_pool_create: output_type %d (KT_TYPE_F32 or KT_TYPE_BF16)", p.output_type);
    c->input_bf16 = p.input_type == KT_TYPE_BF16;
    c->output_bf16 = p.output_type == KT_TYPE_BF16;
    c->n_threads = p.n_threads;
    switch (p.numa_policy) {
        case KT_NUMA_AUTO: c->numa = kt::moe::NumaPolicy::kAuto; break;
        case KT_NUMA_OFF: c->numa = kt::moe::NumaPolicy::kOff; break;
        case KT_NUMA_NODES:
            c->numa = kt::moe::NumaPolicy::kNodes;
            KT_RETURN_IF(p.n_numa_nodes < 1 || p.n_numa_nodes > 1024 || !p.numa_nodes, KT_STATUS_INVALID_ARGUMENT,
                         "kt_expert_pool_create: KT_NUMA_NODES needs numa_nodes and 1..1024 n_numa_nodes (got %d)",
                         p.n_numa_nodes);
            c->numa_nodes.assign(p.numa_nodes, p.numa_nodes + p.n_numa_nodes);
            break;
        default: return Status::error(KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_create: numa_policy %d", p.numa_policy);
    }
    c->swiglu.limit = p.swiglu_limit;
    c->swiglu.alpha = p.swiglu_alpha;
    c->max_in_flight = p.max_in_flight;
    KT_RETURN_IF(p.spin_microseconds < 0 || p.spin_microseconds > 10'000'000, KT_STATUS_INVALID_ARGUMENT,
                 "kt_expert_pool_create: spin_microseconds %d", p.spin_microseconds);
    c->spin_ns = static_cast<int64_t>(p.spin_microseconds) * 1000;
    c->private_threads = p.private_threads != 0;
    return Status::ok();
}

Status to_forward_args(const kt_expert_forward *in, kt::moe::ForwardArgs *out) {
    KT_RETURN_IF(!in, KT_STATUS_INVALID_ARGUMENT, "expert pool: args is NULL");
    kt_expert_forward a;
    KT_TRY(kt::api::read_struct(in, &a, "kt_expert_forward"));
    KT_RETURN_IF(a.reserved0 != 0, KT_STATUS_INVALID_ARGUMENT, "expert pool: args.reserved0 must be 0");
    KT_RETURN_IF(a.ids_type != KT_TYPE_I32 && a.ids_type != KT_TYPE_I64, KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: ids_type %d (KT_TYPE_I32 or KT_TYPE_I64)", a.ids_type);
    out->n_tokens = a.n_tokens;
    out->top_k = a.top_k;
    out->input = a.input;
    out->ids = a.expert_ids;
    out->ids_i64 = a.ids_type == KT_TYPE_I64;
    out->weights = a.expert_weights;
    out->output = a.output;
    out->accumulate = a.accumulate != 0;
    return Status::ok();
}

Status source_from_model(const kt::gguf::File &file, const std::string &name, kt::moe::MatrixSource *out,
                         int64_t *ne0, int64_t *ne1, int64_t *ne2) {
    const kt::gguf::TensorInfo *t = file.find_tensor(name);
    KT_RETURN_IF(!t, KT_STATUS_NOT_FOUND, "%s: no tensor '%s'", file.source_name().c_str(), name.c_str());
    KT_RETURN_IF(t->n_dims != 3, KT_STATUS_INVALID_ARGUMENT, "%s: tensor '%s' has %d dimensions (expected 3)",
                 file.source_name().c_str(), name.c_str(), t->n_dims);
    *ne0 = t->ne[0];
    *ne1 = t->ne[1];
    *ne2 = t->ne[2];
    KT_TRY(kt::moe::make_source(t->type, t->data, t->ne[1] * t->ne[2], t->ne[0], out).with_context(name));
    out->drop_after_packing = &file.bytes();  // a page read again (another pool, a context) comes back from the file
    return Status::ok();
}

void describe(kt_expert_pool *h) {
    const kt::moe::PoolInfo &i = h->pool->info();
    h->formats = h->pool->loaded() ? "gate " + i.gate_type + ", up " + i.up_type + ", down " + i.down_type : "";
    std::string d = kt::format("%d group(s)", i.groups);
    for (int g = 0; g < i.groups; ++g) {
        d += kt::format("; group %d: node %d, %d threads", g, i.group_nodes[static_cast<size_t>(g)],
                        i.group_threads[static_cast<size_t>(g)]);
        if (static_cast<size_t>(g) + 1 < i.shard_begin.size())
            d += kt::format(", I [%lld, %lld), memory %s", static_cast<long long>(i.shard_begin[static_cast<size_t>(g)]),
                            static_cast<long long>(i.shard_begin[static_cast<size_t>(g) + 1]),
                            static_cast<size_t>(g) < i.placement.size() ? i.placement[static_cast<size_t>(g)].c_str() : "-");
    }
    h->description = d;
}

}  // namespace

extern "C" {

// ---- CPU ISA ----

KT_API kt_status kt_set_max_isa(int32_t level) {
    if (level < KT_ISA_SCALAR || level > KT_ISA_AMX) return KT_STATUS_INVALID_ARGUMENT;
    kt::cpu::set_max_isa_level(static_cast<kt::cpu::IsaLevel>(level));
    return KT_STATUS_OK;
}

KT_API int32_t kt_get_isa(void) { return static_cast<int32_t>(kt::cpu::active_isa_level()); }
KT_API int32_t kt_get_host_isa(void) { return static_cast<int32_t>(kt::cpu::host_isa_level()); }

KT_API const char *kt_isa_name(int32_t level) {
    if (level < KT_ISA_SCALAR || level > KT_ISA_AMX) return nullptr;
    return kt::cpu::isa_level_name(static_cast<kt::cpu::IsaLevel>(level));
}

static_assert(kt::cpu::kIsaLevels == KT_ISA_AMX + 1, "kt_gemm_counts indexes its arrays by KT_ISA_*");

KT_API kt_status kt_get_gemm_counts(kt_gemm_counts *out) {
    if (!out) return KT_STATUS_INVALID_ARGUMENT;
    const kt::cpu::GemmCounts c = kt::cpu::process_gemm_counts();
    kt_gemm_counts r = kt::api::zeroed_struct<kt_gemm_counts>();
    for (int l = 0; l < 4; ++l) {
        r.calls[l] = c.calls[l];
        r.int8_macs[l] = c.int8_macs[l];
        r.bf16_macs[l] = c.bf16_macs[l];
    }
    r.amx_fallbacks = c.amx_fallbacks;
    return kt::api::write_struct(r, out, "kt_get_gemm_counts: out").code();
}

// ---- expert pools ----

KT_API void kt_expert_pool_params_init(kt_expert_pool_params *p) {
    if (!p) return;
    *p = kt::api::zeroed_struct<kt_expert_pool_params>();
    p->max_tokens = 512;
    p->max_top_k = 8;
    p->weight_format = KT_EXPERT_WEIGHTS_AS_SOURCE;
    p->int4_group_size = 128;
    p->input_type = KT_TYPE_F32;
    p->output_type = KT_TYPE_F32;
    p->numa_policy = KT_NUMA_AUTO;
    p->max_in_flight = 4;
    p->spin_microseconds = 100;
}

KT_API void kt_expert_forward_init(kt_expert_forward *a) {
    if (!a) return;
    *a = kt::api::zeroed_struct<kt_expert_forward>();
    a->ids_type = KT_TYPE_I32;
}

KT_API kt_status kt_expert_pool_create(const kt_expert_pool_params *params, kt_expert_pool **out_pool, kt_error *err) {
    if (out_pool) *out_pool = nullptr;
    const Status s = guard([&]() -> Status {
        KT_RETURN_IF(!params || !out_pool, KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_create: params and out_pool must not be NULL");
        kt_expert_pool_params p;
        KT_TRY(kt::api::read_struct(params, &p, "kt_expert_pool_create: params"));
        kt::moe::ExpertPoolConfig config;
        KT_TRY(make_config(p, &config));
        kt::cpu::warn_ignored_kernel_environment();
        auto handle = std::make_unique<kt_expert_pool>();
        KT_TRY(kt::moe::ExpertPool::create(config, &handle->pool));
        describe(handle.get());
        *out_pool = handle.release();
        return Status::ok();
    });
    kt::api::fill_error(err, s);
    return s.code();
}

KT_API void kt_expert_pool_free(kt_expert_pool *pool) {
    if (!pool) return;
    try {
        delete pool;
    } catch (...) {  // destructors do not throw; nothing may escape the ABI regardless
    }
}

KT_API const char *kt_expert_pool_last_error(const kt_expert_pool *pool) {
    return pool ? pool->error.get() : "expert pool is NULL";
}

KT_API kt_status kt_expert_pool_load_model(kt_expert_pool *pool, const kt_model *model, int32_t layer) {
    if (!pool) return KT_STATUS_INVALID_ARGUMENT;
    return guard_on(pool, [&]() -> Status {
        KT_RETURN_IF(!model, KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_load_model: model is NULL");
        KT_RETURN_IF(layer < 0, KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_load_model: layer %d", layer);
        const kt::gguf::File &f = *model->file;
        const auto &c = pool->pool->config();
        kt::moe::MatrixSource gate, up, down;
        int64_t g0, g1, g2, u0, u1, u2, d0, d1, d2;
        const std::string prefix = "blk." + std::to_string(layer) + ".";
        KT_TRY(source_from_model(f, prefix + "ffn_gate_exps.weight", &gate, &g0, &g1, &g2));
        KT_TRY(source_from_model(f, prefix + "ffn_up_exps.weight", &up, &u0, &u1, &u2));
        KT_TRY(source_from_model(f, prefix + "ffn_down_exps.weight", &down, &d0, &d1, &d2));
        KT_RETURN_IF(g0 != c.hidden || g1 != c.intermediate || g2 != c.n_experts || u0 != g0 || u1 != g1 || u2 != g2 ||
                         d0 != c.intermediate || d1 != c.hidden || d2 != c.n_experts,
                     KT_STATUS_INVALID_ARGUMENT,
                     "%s layer %d: expert tensors gate [%lld, %lld, %lld], up [%lld, %lld, %lld], down [%lld, %lld, %lld] "
                     "(GGML order) do not match the pool (hidden %lld, intermediate %lld, experts %lld)",
                     f.source_name().c_str(), layer, static_cast<long long>(g0), static_cast<long long>(g1),
                     static_cast<long long>(g2), static_cast<long long>(u0), static_cast<long long>(u1),
                     static_cast<long long>(u2), static_cast<long long>(d0), static_cast<long long>(d1),
                     static_cast<long long>(d2), static_cast<long long>(c.hidden), static_cast<long long>(c.intermediate),
                     static_cast<long long>(c.n_experts));
        KT_TRY(pool->pool->load(gate, up, down));
        describe(pool);
        return Status::ok();
    });
}

KT_API kt_status kt_expert_pool_load_experts(kt_expert_pool *pool, const kt_expert_weights *weights,
                                             int32_t first_expert, int32_t n_experts) {
    if (!pool) return KT_STATUS_INVALID_ARGUMENT;
    return guard_on(pool, [&]() -> Status {
        KT_RETURN_IF(!weights, KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_load: weights is NULL");
        const auto &c = pool->pool->config();
        KT_RETURN_IF(first_expert < 0 || n_experts < 1 || static_cast<int64_t>(first_expert) + n_experts > c.n_experts,
                     KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_load_experts: experts [%d, %d + %d) of %lld", first_expert,
                     first_expert, n_experts, static_cast<long long>(c.n_experts));
        kt_expert_weights w;
        KT_TRY(kt::api::read_struct(weights, &w, "kt_expert_pool_load: weights"));
        KT_RETURN_IF(!w.gate || !w.up || !w.down, KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_load: a weight pointer is NULL");
        kt::moe::MatrixSource gate, up, down;
        const int64_t n = n_experts;
        KT_TRY(kt::moe::make_source(w.gate_type, w.gate, n * c.intermediate, c.hidden, &gate).with_context("gate"));
        KT_TRY(kt::moe::make_source(w.up_type, w.up, n * c.intermediate, c.hidden, &up).with_context("up"));
        KT_TRY(kt::moe::make_source(w.down_type, w.down, n * c.hidden, c.intermediate, &down).with_context("down"));
        KT_TRY(pool->pool->load(gate, up, down, first_expert, n));
        describe(pool);
        return Status::ok();
    });
}

KT_API kt_status kt_expert_pool_load(kt_expert_pool *pool, const kt_expert_weights *weights) {
    if (!pool) return KT_STATUS_INVALID_ARGUMENT;
    return kt_expert_pool_load_experts(pool, weights, 0, static_cast<int32_t>(pool->pool->config().n_experts));
}

KT_API kt_status kt_expert_pool_set_mask(kt_expert_pool *pool, const uint8_t *mask, int32_t n_experts) {
    if (!pool) return KT_STATUS_INVALID_ARGUMENT;
    return guard_on(pool, [&]() -> Status { return pool->pool->set_mask(mask, n_experts); });
}

KT_API kt_status kt_expert_pool_forward(kt_expert_pool *pool, const kt_expert_forward *args) {
    if (!pool) return KT_STATUS_INVALID_ARGUMENT;
    return guard_on(pool, [&]() -> Status {
        kt::moe::ForwardArgs a;
        KT_TRY(to_forward_args(args, &a));
        return pool->pool->forward(a);
    });
}

KT_API kt_status kt_expert_pool_submit(kt_expert_pool *pool, const kt_expert_forward *args, uint64_t *out_ticket) {
    if (!pool) return KT_STATUS_INVALID_ARGUMENT;
    return guard_on(pool, [&]() -> Status {
        kt::moe::ForwardArgs a;
        KT_TRY(to_forward_args(args, &a));
        uint64_t ticket = 0;
        KT_TRY(pool->pool->submit(a, &ticket));
        if (out_ticket) *out_ticket = ticket;
        return Status::ok();
    });
}

KT_API kt_status kt_expert_pool_wait(kt_expert_pool *pool, uint64_t ticket) {
    if (!pool) return KT_STATUS_INVALID_ARGUMENT;
    return guard_on(pool, [&]() -> Status { return pool->pool->wait(ticket); });
}

KT_API kt_status kt_expert_pool_get_info(const kt_expert_pool *pool, kt_expert_pool_info *out) {
    if (!pool) return KT_STATUS_INVALID_ARGUMENT;
    return guard_on(pool, [&]() -> Status {
        KT_RETURN_IF(!out, KT_STATUS_INVALID_ARGUMENT, "kt_expert_pool_get_info: out_info is NULL");
        const kt::moe::ExpertPool &p = *pool->pool;
        kt_expert_pool_info info = kt::api::zeroed_struct<kt_expert_pool_info>();
        info.isa = static_cast<int32_t>(p.kernels().level);
        info.n_threads = 0;
        for (int t : p.info().group_threads) info.n_threads += t;
        info.n_numa_groups = p.info().groups;
        info.loaded = p.loaded() ? 1 : 0;
        info.weight_bytes = p.info().weight_bytes;
        info.expert_bytes = p.info().expert_bytes;
        info.load_seconds = p.info().load_seconds;
        info.kernels = p.info().kernel_set.c_str();
        info.weight_formats = pool->formats.c_str();
        info.description = pool->description.c_str();
        const kt::cpu::GemmCounts counts = p.gemm_counts();
        for (int l = 0; l < 4; ++l) {
            info.gemm_calls[l] = counts.calls[l];
            info.gemm_int8_macs[l] = counts.int8_macs[l];
            info.gemm_bf16_macs[l] = counts.bf16_macs[l];
        }
        info.amx_fallbacks = counts.amx_fallbacks;
        return kt::api::write_struct(info, out, "kt_expert_pool_get_info: out_info");
    });
}

}  // extern "C"
