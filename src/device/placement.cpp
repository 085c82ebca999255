#include "device/placement.h"

#include <algorithm>
#include <numeric>

#include "device/device.h"

namespace kt::device {

const LayerPlacement *Plan::find(int64_t layer) const {
    for (const LayerPlacement &l : layers)
        if (l.layer == layer) return &l;
    return nullptr;
}

std::string Plan::to_string() const {
    std::string s = format("device plan: budget %llu bytes, work buffer %llu, stream buffer %llu, dense FFNs %lld (%llu "
                           "bytes), experts %llu, used %llu (%s)\n",
                           static_cast<unsigned long long>(budget_bytes),
                           static_cast<unsigned long long>(non_expert_bytes - stream_bytes - dense_bytes),
                           static_cast<unsigned long long>(stream_bytes), static_cast<long long>(n_dense),
                           static_cast<unsigned long long>(dense_bytes), static_cast<unsigned long long>(expert_bytes),
                           static_cast<unsigned long long>(used_bytes()),
                           by_counts ? "hottest by activation counts" : "no counts: lowest ids");
    for (const LayerPlacement &l : layers) {
        s += format("layer %lld: %zu/%lld experts [", static_cast<long long>(l.layer), l.experts.size(),
                    static_cast<long long>(l.n_experts));
        for (size_t i = 0; i < l.experts.size(); ++i) s += format(i ? " %d" : "%d", l.experts[i]);
        s += format("], %llu bytes\n", static_cast<unsigned long long>(l.bytes));
    }
    return s;
}

Status plan_placement(const std::vector<PlacementLayer> &layers, const PlacementRequest &r, Plan *out) {
    KT_RETURN_IF(r.experts_per_layer < 0, KT_STATUS_INVALID_ARGUMENT, "placement: experts per layer is negative");
    KT_RETURN_IF(!r.counts.empty() && r.counts.size() != layers.size(), KT_STATUS_INVALID_ARGUMENT,
                 "placement: counts for %zu layers, the model has %zu MoE layers", r.counts.size(), layers.size());
    KT_RETURN_IF(r.stream_bytes + r.dense_bytes > r.non_expert_bytes, KT_STATUS_INVALID_ARGUMENT,
                 "placement: the stream buffer and dense FFNs are larger than the non-expert part");
    KT_RETURN_IF(r.non_expert_bytes > r.budget_bytes, KT_STATUS_OUT_OF_MEMORY,
                 "placement: the non-expert part (%llu bytes: the device's work buffer %llu, the stream buffer %llu, %lld "
                 "dense FFNs and shared experts %llu) does not fit the budget of %llu bytes",
                 static_cast<unsigned long long>(r.non_expert_bytes),
                 static_cast<unsigned long long>(r.non_expert_bytes - r.stream_bytes - r.dense_bytes),
                 static_cast<unsigned long long>(r.stream_bytes), static_cast<long long>(r.n_dense),
                 static_cast<unsigned long long>(r.dense_bytes), static_cast<unsigned long long>(r.budget_bytes));
    const uint64_t room = r.budget_bytes - r.non_expert_bytes;
    std::vector<uint64_t> each(layers.size());
    for (size_t i = 0; i < layers.size(); ++i) each[i] = expert_bytes(layers[i].hidden, layers[i].intermediate);
    auto bytes_for = [&](int64_t c) {  // every layer min(c, n) experts
        uint64_t b = 0;
        for (size_t i = 0; i < layers.size(); ++i) b += static_cast<uint64_t>(std::min(c, layers[i].n_experts)) * each[i];
        return b;
    };
    std::vector<int64_t> count(layers.size(), 0);
    if (r.experts_per_layer > 0) {
        for (const PlacementLayer &l : layers)
            KT_RETURN_IF(r.experts_per_layer > l.n_experts, KT_STATUS_INVALID_ARGUMENT,
                         "placement: %lld device experts per layer requested, but layer %lld has %lld experts",
                         static_cast<long long>(r.experts_per_layer), static_cast<long long>(l.layer),
                         static_cast<long long>(l.n_experts));
        const uint64_t need = bytes_for(r.experts_per_layer);
        KT_RETURN_IF(need > room, KT_STATUS_OUT_OF_MEMORY,
                     "placement: %lld experts per layer need %llu bytes on the device plus %llu for the rest (work "
                     "and stream buffers, dense FFNs), but the budget is %llu bytes",
                     static_cast<long long>(r.experts_per_layer), static_cast<unsigned long long>(need),
                     static_cast<unsigned long long>(r.non_expert_bytes), static_cast<unsigned long long>(r.budget_bytes));
        std::fill(count.begin(), count.end(), r.experts_per_layer);
    } else {
        int64_t max_n = 0;
        for (const PlacementLayer &l : layers) max_n = std::max(max_n, l.n_experts);
        int64_t c = 0;
        while (c < max_n && bytes_for(c + 1) <= room) ++c;
        uint64_t used = bytes_for(c);
        for (size_t i = 0; i < layers.size(); ++i) {
            count[i] = std::min(c, layers[i].n_experts);
            if (count[i] < layers[i].n_experts && used + each[i] <= room) {
                ++count[i];
                used += each[i];
            }
        }
        KT_RETURN_IF(!layers.empty() && std::all_of(count.begin(), count.end(), [](int64_t n) { return n == 0; }),
                     KT_STATUS_OUT_OF_MEMORY,
                     "placement: the budget of %llu bytes holds the rest (work and stream buffers, dense "
                     "FFNs: %llu bytes) but no expert (%llu bytes each in the smallest layer)",
                     static_cast<unsigned long long>(r.budget_bytes), static_cast<unsigned long long>(r.non_expert_bytes),
                     static_cast<unsigned long long>(*std::min_element(each.begin(), each.end())));
    }

    Plan plan;
    plan.budget_bytes = r.budget_bytes;
    plan.non_expert_bytes = r.non_expert_bytes;
    plan.stream_bytes = r.stream_bytes;
    plan.dense_bytes = r.dense_bytes;
    plan.n_dense = r.n_dense;
    for (size_t i = 0; i < layers.size(); ++i) {
        const PlacementLayer &l = layers[i];
        const std::vector<uint64_t> *counts = r.counts.empty() || r.counts[i].empty() ? nullptr : &r.counts[i];
        KT_RETURN_IF(counts && static_cast<int64_t>(counts->size()) != l.n_experts, KT_STATUS_INVALID_ARGUMENT,
                     "placement: layer %lld has %lld experts but %zu counts", static_cast<long long>(l.layer),
                     static_cast<long long>(l.n_experts), counts->size());
        if (counts) plan.by_counts = true;
        std::vector<int32_t> order(static_cast<size_t>(l.n_experts));
        std::iota(order.begin(), order.end(), 0);
        if (counts)
            std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
                return (*counts)[static_cast<size_t>(a)] > (*counts)[static_cast<size_t>(b)];
            });
        LayerPlacement lp;
        lp.layer = l.layer;
        lp.n_experts = l.n_experts;
        lp.experts.assign(order.begin(), order.begin() + count[i]);
        std::sort(lp.experts.begin(), lp.experts.end());
        lp.bytes = static_cast<uint64_t>(count[i]) * each[i];
        plan.expert_bytes += lp.bytes;
        plan.layers.push_back(std::move(lp));
    }
    *out = std::move(plan);
    return Status::ok();
}

}  // namespace kt::device
