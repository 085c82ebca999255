// The hybrid path through kt.h: a device and its placement chosen at kt_model_load, the plan and the activation
// counts read back.
#include <algorithm>
#include <cstring>
#include <string>

#include "api/api_internal.h"
#include "core/log.h"
#include "runtime/hybrid_ffn.h"

using kt::Status;
using kt::api::guard_on;

namespace kt::api {
namespace {

// The MoE layers of the file: every "blk.<n>.ffn_gate_exps.weight" (ne = {H, I, X}).
Status moe_layers(const gguf::File &file, std::vector<device::PlacementLayer> *out, int64_t *n_layer) {
    out->clear();
    *n_layer = 0;
    for (const gguf::TensorInfo &t : file.tensors()) {
        const std::string name(t.name);
        const int64_t layer = runtime::block_of(name.c_str());
        if (layer < 0) continue;
        *n_layer = std::max(*n_layer, layer + 1);
        const std::string suffix = ".ffn_gate_exps.weight";
        if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
        if (t.n_dims != 3) continue;
        const std::string bias = name.substr(0, name.size() - std::strlen("weight")) + "bias";
        KT_RETURN_IF(file.find_tensor(bias) != nullptr, KT_STATUS_UNSUPPORTED,
                     "device: %s has biases: the device computes plain SwiGLU experts only", name.c_str());
        device::PlacementLayer l;
        l.layer = layer;
        l.hidden = t.ne[0];
        l.intermediate = t.ne[1];
        l.n_experts = t.ne[2];
        out->push_back(l);
    }
    std::sort(out->begin(), out->end(), [](const auto &a, const auto &b) { return a.layer < b.layer; });
    return Status::ok();
}

// The dense FFNs and shared experts of the file that the device computes: every "blk.<n>.ffn_gate.weight" and
// "blk.<n>.ffn_gate_shexp.weight" (ne = {H, I}) of a layer without FFN biases, as one-expert device layers.
std::vector<device::PlacementLayer> dense_ffns(const gguf::File &file) {
    std::vector<device::PlacementLayer> out;
    for (const gguf::TensorInfo &t : file.tensors()) {
        const std::string name(t.name);
        const int64_t layer = runtime::block_of(name.c_str());
        if (layer < 0 || t.n_dims != 2) continue;
        const size_t dot = name.find('.', 4);
        const std::string rest = name.substr(dot + 1);
        if (rest != "ffn_gate.weight" && rest != "ffn_gate_shexp.weight") continue;
        if (file.find_tensor(name.substr(0, name.size() - std::strlen("weight")) + "bias")) continue;  // stays on the CPU
        device::PlacementLayer l;
        l.layer = layer;
        l.n_experts = 1;
        l.hidden = t.ne[0];
        l.intermediate = t.ne[1];
        out.push_back(l);
    }
    return out;
}

// Every hybrid FFN of the prepared model: routed experts, dense FFNs and shared experts on the device.
template <typename Fn>
void for_each_hybrid(const model::Model &m, Fn &&fn) {
    for (const model::LayerWeights &L : m.w.layers)
        for (const model::Ffn *f : {&L.experts, &L.ffn, &L.shared})
            if (const auto *h = dynamic_cast<const runtime::HybridFfn *>(f->experts.get())) fn(*h);
}

std::string split_line(const kt_model *model) {
    const std::shared_ptr<const model::Model> &m = model->runners[KT_KERNELS_AUTO];
    if (!m) return "";
    runtime::HybridStats sum;
    const runtime::DeferredChain *chain = nullptr;
    for_each_hybrid(*m, [&](const runtime::HybridFfn &h) {
        sum.add(h.stats());
        if (h.chain()) chain = h.chain();
    });
    // Hidden: the routed calls' CPU and device work at the same time, plus the shared experts' device work done
    // beside the routed experts (begun before them, finished after).
    const int64_t shorter = std::min(sum.cpu_ns, sum.device_ns), hidden = sum.overlap_ns + sum.begun_hidden_ns;
    std::string deferred;
    if (chain) {
        const runtime::DeferredStats d = chain->stats();
        deferred = format(", deferred jobs %lld: %.3f ms, %.1f %% of it hidden (run before the next layer waited)",
                          static_cast<long long>(d.jobs), static_cast<double>(d.ns) * 1e-6,
                          d.ns > 0 ? 100.0 * static_cast<double>(d.hidden_ns) / static_cast<double>(d.ns) : 0.0);
    }
    std::string streamed;
    if (sum.streamed_calls > 0 || model->device_prefill_threshold > 0)
        streamed = format(", streamed calls %lld (over %d tokens): %lld uploads, %.1f MB in %.3f ms; %lld found their "
                          "layer uploaded ahead (%.3f ms of uploads, %.3f ms of it waited for)",
                          static_cast<long long>(sum.streamed_calls), model->device_prefill_threshold,
                          static_cast<long long>(sum.stream_uploads), static_cast<double>(sum.stream_bytes) * 1e-6,
                          static_cast<double>(sum.stream_upload_ns) * 1e-6, static_cast<long long>(sum.stream_ahead_calls),
                          static_cast<double>(sum.stream_ahead_ns) * 1e-6,
                          static_cast<double>(sum.stream_ahead_wait_ns) * 1e-6);
    std::string begun;
    if (sum.begun_calls > 0)
        begun = format(", shared experts begun before the routed ones %lld: %.3f ms of their device work ran beside them",
                       static_cast<long long>(sum.begun_calls), static_cast<double>(sum.begun_hidden_ns) * 1e-6);
    return format("split: %lld calls, rows %lld on the device / %lld on the CPU (%lld deferred), device %.3f ms, "
                  "cpu %.3f ms, hidden %.3f ms (%.1f %% of the shorter side: %.3f ms routed + %.3f ms shared experts), "
                  "wall %.3f ms%s%s%s\n",
                  static_cast<long long>(sum.calls), static_cast<long long>(sum.device_rows),
                  static_cast<long long>(sum.cpu_rows), static_cast<long long>(sum.deferred_rows),
                  static_cast<double>(sum.device_ns) * 1e-6, static_cast<double>(sum.cpu_ns) * 1e-6,
                  static_cast<double>(hidden) * 1e-6,
                  shorter > 0 ? 100.0 * static_cast<double>(hidden) / static_cast<double>(shorter) : 0.0,
                  static_cast<double>(sum.overlap_ns) * 1e-6, static_cast<double>(sum.begun_hidden_ns) * 1e-6,
                  static_cast<double>(sum.wall_ns) * 1e-6, deferred.c_str(), streamed.c_str(), begun.c_str());
}

// What the hybrid layers hold in host memory: the CPU side's packed weights.
std::string host_line(const kt_model *model) {
    const std::shared_ptr<const model::Model> &m = model->runners[KT_KERNELS_AUTO];
    if (!m) return "";
    uint64_t routed = 0, routed_resident = 0, single = 0;
    for_each_hybrid(*m, [&](const runtime::HybridFfn &h) {
        const uint64_t bytes = h.host_weight_bytes();
        if (h.n_experts() > 1) {
            routed += bytes;
            routed_resident += bytes / static_cast<uint64_t>(h.n_experts()) * static_cast<uint64_t>(h.layer().n_resident());
        } else {
            single += bytes;
        }
    });
    return format("host: routed experts' CPU weights %llu bytes, %llu of them copies of those on the device (kept for "
                  "kt_model_device_replace); dense FFNs and shared experts on the device %llu bytes\n",
                  static_cast<unsigned long long>(routed), static_cast<unsigned long long>(routed_resident),
                  static_cast<unsigned long long>(single));
}

// counts [n_layer][n_expert] -> one row per MoE layer of `layers`.
Status read_counts(const std::vector<device::PlacementLayer> &layers, int64_t n_layer, const uint64_t *counts,
                   uint64_t len, std::vector<std::vector<uint64_t>> *out) {
    KT_RETURN_IF(!counts, KT_STATUS_INVALID_ARGUMENT, "the counts are NULL but their length is %llu",
                 static_cast<unsigned long long>(len));
    const int64_t n_expert = layers.front().n_experts;
    const uint64_t want = static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(n_expert);
    KT_RETURN_IF(len != want, KT_STATUS_INVALID_ARGUMENT, "%llu counts, expected n_layer * n_expert = %lld * %lld",
                 static_cast<unsigned long long>(len), static_cast<long long>(n_layer), static_cast<long long>(n_expert));
    out->clear();
    for (const device::PlacementLayer &l : layers) {
        KT_RETURN_IF(l.n_experts != n_expert, KT_STATUS_UNSUPPORTED, "counts need the same expert count in every layer");
        const uint64_t *row = counts + l.layer * n_expert;
        out->emplace_back(row, row + n_expert);
    }
    return Status::ok();
}

}  // namespace

Status setup_device(kt_model *model, const kt_model_params &p) {
    KT_RETURN_IF(p.device != KT_DEVICE_NONE && p.device != KT_DEVICE_CPU_STANDIN && p.device != KT_DEVICE_CUDA,
                 KT_STATUS_INVALID_ARGUMENT, "kt_model_load: params.device %d is not a KT_DEVICE_*", p.device);
    KT_RETURN_IF(p.device_prefill_threshold < 0, KT_STATUS_INVALID_ARGUMENT,
                 "kt_model_load: params.device_prefill_threshold is negative (%d)", p.device_prefill_threshold);
    KT_RETURN_IF(p.device_prefill_threshold > 0 && p.device == KT_DEVICE_NONE, KT_STATUS_INVALID_ARGUMENT,
                 "kt_model_load: params.device_prefill_threshold is %d, but no device was asked for (the threshold "
                 "moves long prompts' experts to the device)", p.device_prefill_threshold);
    KT_RETURN_IF(p.device_deferred_experts < 0, KT_STATUS_INVALID_ARGUMENT,
                 "kt_model_load: params.device_deferred_experts is negative (%d)", p.device_deferred_experts);
    KT_RETURN_IF(p.device_deferred_experts > 0 && p.device == KT_DEVICE_NONE, KT_STATUS_INVALID_ARGUMENT,
                 "kt_model_load: params.device_deferred_experts is %d, but no device was asked for (deferred "
                 "experts overlap the CPU experts with the device's work)", p.device_deferred_experts);
    if (p.device == KT_DEVICE_NONE) return Status::ok();
    KT_RETURN_IF(p.device_experts < 0, KT_STATUS_INVALID_ARGUMENT, "kt_model_load: params.device_experts is negative");
    KT_RETURN_IF(p.device_index < 0, KT_STATUS_INVALID_ARGUMENT, "kt_model_load: params.device_index is negative");
    KT_RETURN_IF(p.device_expert_counts_len > 0 && !p.device_expert_counts, KT_STATUS_INVALID_ARGUMENT,
                 "kt_model_load: params.device_expert_counts is NULL but its length is %llu",
                 static_cast<unsigned long long>(p.device_expert_counts_len));

    std::vector<device::PlacementLayer> layers;
    int64_t n_layer = 0;
    KT_TRY(moe_layers(*model->file, &layers, &n_layer));
    KT_RETURN_IF(layers.empty(), KT_STATUS_UNSUPPORTED, "kt_model_load: a device was asked for, but %s has no routed experts",
                 model->file->source_name().c_str());

    device::PlacementRequest request;
    request.budget_bytes = p.device_budget_bytes;
    request.experts_per_layer = p.device_experts;
    // The work buffer covers every layer the device computes; the stream buffer the routed layers only.
    const runtime::EngineOptions engine_defaults;
    device::LayerShape covering, routed;
    for (const device::PlacementLayer &l : layers)
        routed = device::cover(routed, runtime::device_layer_shape(engine_defaults, l.n_experts, l.hidden, l.intermediate));
    covering = routed;
    for (const device::PlacementLayer &d : dense_ffns(*model->file)) {
        covering = device::cover(covering, runtime::device_layer_shape(engine_defaults, 1, d.hidden, d.intermediate));
        request.dense_bytes += device::expert_bytes(d.hidden, d.intermediate);
        ++request.n_dense;
    }
    request.non_expert_bytes = device::workspace_bytes(covering) + request.dense_bytes;
    // Two slots when there is a next MoE layer, whose experts go up while its attention runs.
    const int32_t stream_slots = layers.size() > 1 ? 2 : 1;
    if (p.device_prefill_threshold > 0) {
        request.stream_bytes = static_cast<uint64_t>(stream_slots) * runtime::StreamBuffer::bytes_for(routed);
        request.non_expert_bytes += request.stream_bytes;
    }
    const device::PlacementRequest without_counts = request;
    if (p.device_expert_counts_len > 0)
        KT_TRY(Status(read_counts(layers, n_layer, p.device_expert_counts, p.device_expert_counts_len, &request.counts))
                   .with_context("kt_model_load: params.device_expert_counts"));
    auto plan = std::make_shared<device::Plan>();
    KT_TRY(Status(device::plan_placement(layers, request, plan.get())).with_context(model->file->source_name()));

    device::DeviceOptions options;
    options.kind = static_cast<device::Kind>(p.device);
    options.budget_bytes = p.device_budget_bytes;
    options.index = p.device_index;
    KT_TRY(device::create_device(options, &model->device));
    model->device_plan = std::move(plan);
    model->device_deferred_experts = p.device_deferred_experts;
    model->device_prefill_threshold = p.device_prefill_threshold;
    model->device_stream_shape = routed;
    model->device_stream_slots = stream_slots;
    model->device_layers = std::move(layers);
    model->device_request = without_counts;
    model->device_n_layer = n_layer;
    KT_LOG_INFO_MSG("%s: device %s\n%s", model->file->source_name().c_str(), model->device->name().c_str(),
                    model->device_plan->to_string().c_str());
    return Status::ok();
}

}  // namespace kt::api

extern "C" {

KT_API kt_status kt_model_device_plan(const kt_model *model, char *buf, uint64_t capacity, uint64_t *out_length) {
    return guard_on(model, [&]() -> Status {
        KT_RETURN_IF(!model, KT_STATUS_INVALID_ARGUMENT, "model is NULL");
        std::string text;
        {
            // The plan is swapped by kt_model_device_replace under this lock.
            std::lock_guard<std::mutex> lock(const_cast<kt_model *>(model)->runners_mutex);
            KT_RETURN_IF(!model->device_plan, KT_STATUS_NOT_FOUND,
                         "kt_model_device_plan: the model was loaded without a device");
            text = model->device_plan->to_string();
            text += kt::format("device %s: %llu bytes in use\n", model->device->name().c_str(),
                               static_cast<unsigned long long>(model->device->used_bytes()));
            text += kt::api::host_line(model);
            text += kt::api::split_line(model);
        }
        if (out_length) *out_length = text.size();
        KT_RETURN_IF(!buf || capacity <= text.size(), KT_STATUS_BUFFER_TOO_SMALL,
                     "kt_model_device_plan: the plan has %zu bytes (plus a NUL), the buffer %llu", text.size(),
                     static_cast<unsigned long long>(capacity));
        std::memcpy(buf, text.c_str(), text.size() + 1);
        return Status::ok();
    });
}

KT_API kt_status kt_model_device_replace(kt_model *model, const uint64_t *counts, uint64_t counts_len) {
    return guard_on(model, [&]() -> Status {
        KT_RETURN_IF(!model, KT_STATUS_INVALID_ARGUMENT, "model is NULL");
        std::lock_guard<std::mutex> lock(model->runners_mutex);
        KT_RETURN_IF(!model->device_plan, KT_STATUS_NOT_FOUND,
                     "kt_model_device_replace: the model was loaded without a device");
        kt::device::PlacementRequest request = model->device_request;
        KT_TRY(kt::Status(kt::api::read_counts(model->device_layers, model->device_n_layer, counts, counts_len,
                                               &request.counts))
                   .with_context("kt_model_device_replace"));
        auto plan = std::make_shared<kt::device::Plan>();
        KT_TRY(kt::Status(kt::device::plan_placement(model->device_layers, request, plan.get()))
                   .with_context("kt_model_device_replace"));
        // Layer by layer; each layer's switch waits for its running call (HybridFfn::replace). A model the engine
        // has not prepared yet is built with the new plan.
        const std::shared_ptr<const kt::model::Model> &m = model->runners[KT_KERNELS_AUTO];
        kt::Status s;
        if (m) {
            for (const kt::model::LayerWeights &L : m->w.layers) {
                auto *h = dynamic_cast<kt::runtime::HybridFfn *>(L.experts.experts.get());
                if (!h) continue;
                const kt::device::LayerPlacement *placed = plan->find(h->model_layer());
                s = h->replace(placed ? placed->experts : std::vector<int32_t>{});
                if (!s.is_ok()) break;
            }
        }
        model->device_plan = std::move(plan);
        KT_LOG_INFO_MSG("%s: experts placed again\n%s", model->file->source_name().c_str(),
                        model->device_plan->to_string().c_str());
        return s;
    });
}

KT_API kt_status kt_model_expert_counts(const kt_model *model, int64_t layer, uint64_t *counts, int64_t capacity,
                                        int64_t *out_count) {
    return guard_on(model, [&]() -> Status {
        KT_RETURN_IF(!model, KT_STATUS_INVALID_ARGUMENT, "model is NULL");
        std::shared_ptr<const kt::model::Model> m;
        {
            std::lock_guard<std::mutex> lock(const_cast<kt_model *>(model)->runners_mutex);
            m = model->runners[KT_KERNELS_AUTO];
        }
        KT_RETURN_IF(!m, KT_STATUS_NOT_FOUND, "kt_model_expert_counts: the expert engine has not prepared this model");
        KT_RETURN_IF(layer < 0 || layer >= static_cast<int64_t>(m->w.layers.size()), KT_STATUS_NOT_FOUND,
                     "kt_model_expert_counts: layer %lld of %zu", static_cast<long long>(layer), m->w.layers.size());
        const auto &experts = m->w.layers[static_cast<size_t>(layer)].experts.experts;
        std::vector<uint64_t> c;
        KT_RETURN_IF(!experts || !experts->activation_counts(&c), KT_STATUS_NOT_FOUND,
                     "kt_model_expert_counts: layer %lld has no routed experts", static_cast<long long>(layer));
        if (out_count) *out_count = static_cast<int64_t>(c.size());
        KT_RETURN_IF(!counts || capacity < static_cast<int64_t>(c.size()), KT_STATUS_BUFFER_TOO_SMALL,
                     "kt_model_expert_counts: %zu experts, capacity %lld", c.size(), static_cast<long long>(capacity));
        std::copy(c.begin(), c.end(), counts);
        return Status::ok();
    });
}

}  // extern "C"
